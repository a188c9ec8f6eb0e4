package scsi

import (
	"encoding/binary"
	"fmt"
)

// SenseKey is the SENSE KEY of sense data (SPC-4 4.5.6, table 48).
type SenseKey uint8

// Sense keys.
const (
	KeyNoSense        SenseKey = 0x0
	KeyRecoveredError SenseKey = 0x1
	KeyNotReady       SenseKey = 0x2
	KeyMediumError    SenseKey = 0x3
	KeyHardwareError  SenseKey = 0x4
	KeyIllegalRequest SenseKey = 0x5
	KeyUnitAttention  SenseKey = 0x6
	KeyDataProtect    SenseKey = 0x7
	KeyBlankCheck     SenseKey = 0x8
	KeyVendorSpecific SenseKey = 0x9
	KeyCopyAborted    SenseKey = 0xa
	KeyAbortedCommand SenseKey = 0xb
	KeyVolumeOverflow SenseKey = 0xd
	KeyMiscompare     SenseKey = 0xe
	KeyCompleted      SenseKey = 0xf
)

var senseKeyNames = [16]string{
	"NO SENSE", "RECOVERED ERROR", "NOT READY", "MEDIUM ERROR",
	"HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT",
	"BLANK CHECK", "VENDOR SPECIFIC", "COPY ABORTED", "ABORTED COMMAND",
	"EQUAL", "VOLUME OVERFLOW", "MISCOMPARE", "COMPLETED",
}

// String returns the sense key name as SPC-4 spells it.
func (k SenseKey) String() string {
	if int(k) < len(senseKeyNames) {
		return senseKeyNames[k]
	}
	return fmt.Sprintf("sense key 0x%x", uint8(k))
}

// Sense data response codes (SPC-4 4.5.1).
const (
	SenseFixedCurrent       = 0x70
	SenseFixedDeferred      = 0x71
	SenseDescriptorCurrent  = 0x72
	SenseDescriptorDeferred = 0x73
)

// Sense is decoded sense data in either format.
type Sense struct {
	// ResponseCode is one of the Sense* response codes; it tells the
	// format and whether the error is deferred.
	ResponseCode uint8
	Key          SenseKey
	ASC, ASCQ    uint8
	// Info is the INFORMATION field, meaningful only when InfoValid; for
	// media errors it is the first failing LBA. Fixed format carries 32
	// bits, descriptor format 64.
	Info      uint64
	InfoValid bool
	// CommandSpecific is the COMMAND-SPECIFIC INFORMATION field (for
	// example the first failing LBA of EXTENDED COPY), zero when absent.
	CommandSpecific uint64
	// SenseKeySpecific holds the three SENSE KEY SPECIFIC bytes with the
	// SKSV bit cleared; meaningful only when SKSValid.
	SenseKeySpecific [3]byte
	SKSValid         bool
	// FRU is the FIELD REPLACEABLE UNIT CODE, zero when absent.
	FRU uint8
	// FileMark, EOM and ILI are the stream and block command flags.
	FileMark, EOM, ILI bool
}

// Deferred reports whether the sense data describes an earlier command
// (response code 0x71 or 0x73) rather than the one it was returned for.
func (s *Sense) Deferred() bool {
	return s.ResponseCode == SenseFixedDeferred || s.ResponseCode == SenseDescriptorDeferred
}

// DescriptorFormat reports whether the sense data used descriptor format.
func (s *Sense) DescriptorFormat() bool {
	return s.ResponseCode == SenseDescriptorCurrent || s.ResponseCode == SenseDescriptorDeferred
}

// FieldPointer is the sense-key-specific field of ILLEGAL REQUEST (SPC-4
// 4.5.2.4.2): which byte (and bit) of the CDB or parameter list was wrong.
type FieldPointer struct {
	CDB      bool   // C/D: the error is in the CDB, not the parameter list
	BitValid bool   // BPV
	Bit      uint8  // BIT POINTER, valid when BitValid
	Byte     uint16 // FIELD POINTER
}

// FieldPointer decodes the sense-key-specific bytes of an ILLEGAL REQUEST.
func (s *Sense) FieldPointer() (FieldPointer, bool) {
	if !s.SKSValid || s.Key != KeyIllegalRequest {
		return FieldPointer{}, false
	}
	b := s.SenseKeySpecific
	return FieldPointer{
		CDB:      b[0]&0x40 != 0,
		BitValid: b[0]&0x08 != 0,
		Bit:      b[0] & 0x07,
		Byte:     binary.BigEndian.Uint16(b[1:3]),
	}, true
}

// Progress decodes the PROGRESS INDICATION of NO SENSE or NOT READY sense
// data (for example a format in progress): done out of 65536.
func (s *Sense) Progress() (done uint16, ok bool) {
	if !s.SKSValid || (s.Key != KeyNoSense && s.Key != KeyNotReady) {
		return 0, false
	}
	return binary.BigEndian.Uint16(s.SenseKeySpecific[1:3]), true
}

const (
	fixedSenseLen        = 18
	descriptorHeaderLen  = 8
	sksValid             = 0x80
	senseDescInformation = 0x00
	senseDescCmdSpecific = 0x01
	senseDescSKS         = 0x02
	senseDescFRU         = 0x03
	senseDescStream      = 0x04
	senseDescBlock       = 0x05
)

// ParseSense decodes fixed (0x70, 0x71) or descriptor (0x72, 0x73) format
// sense data. Like Linux's scsi_normalize_sense it trusts the ADDITIONAL
// SENSE LENGTH only as far as the buffer goes, and fields beyond the data
// read as zero: targets truncate sense data, and a key without an ASC is
// still worth reporting. It fails only when the response code is unknown
// or the buffer ends before the sense key.
func ParseSense(b []byte) (Sense, error) {
	if len(b) == 0 {
		return Sense{}, fmt.Errorf("parse sense data: empty: %w", ErrShortData)
	}
	rc := b[0] & 0x7f
	switch rc {
	case SenseFixedCurrent, SenseFixedDeferred:
		return parseFixedSense(b, rc)
	case SenseDescriptorCurrent, SenseDescriptorDeferred:
		return parseDescriptorSense(b, rc)
	}
	return Sense{}, fmt.Errorf("parse sense data: response code 0x%02x: %w", rc, ErrMalformed)
}

func parseFixedSense(b []byte, rc uint8) (Sense, error) {
	if len(b) < 3 {
		return Sense{}, fmt.Errorf("parse fixed sense data: %d bytes, sense key is in byte 2: %w", len(b), ErrShortData)
	}
	if len(b) > 7 {
		b = b[:min(len(b), 8+int(b[7]))]
	}
	s := Sense{
		ResponseCode: rc,
		Key:          SenseKey(b[2] & 0x0f),
		FileMark:     b[2]&0x80 != 0,
		EOM:          b[2]&0x40 != 0,
		ILI:          b[2]&0x20 != 0,
	}
	if len(b) >= 7 && b[0]&0x80 != 0 {
		s.InfoValid = true
		s.Info = uint64(binary.BigEndian.Uint32(b[3:7]))
	}
	if len(b) >= 12 {
		s.CommandSpecific = uint64(binary.BigEndian.Uint32(b[8:12]))
	}
	if len(b) >= 13 {
		s.ASC = b[12]
	}
	if len(b) >= 14 {
		s.ASCQ = b[13]
	}
	if len(b) >= 15 {
		s.FRU = b[14]
	}
	if len(b) >= 18 && b[15]&sksValid != 0 {
		s.SKSValid = true
		s.SenseKeySpecific = [3]byte{b[15] &^ sksValid, b[16], b[17]}
	}
	return s, nil
}

func parseDescriptorSense(b []byte, rc uint8) (Sense, error) {
	if len(b) < 2 {
		return Sense{}, fmt.Errorf("parse descriptor sense data: %d bytes, sense key is in byte 1: %w", len(b), ErrShortData)
	}
	s := Sense{ResponseCode: rc, Key: SenseKey(b[1] & 0x0f)}
	if len(b) > 2 {
		s.ASC = b[2]
	}
	if len(b) > 3 {
		s.ASCQ = b[3]
	}
	if len(b) < descriptorHeaderLen {
		return s, nil
	}
	b = b[:min(len(b), descriptorHeaderLen+int(b[7]))]
	// Walk the descriptors; a truncated last one is ignored, as Linux's
	// scsi_sense_desc_find does. The first descriptor of each type wins.
	seen := uint8(0)
	for off := descriptorHeaderLen; off+2 <= len(b); {
		typ, dlen := b[off], int(b[off+1])
		end := off + 2 + dlen
		if end > len(b) {
			break
		}
		d := b[off:end]
		if typ < 8 && seen&(1<<typ) == 0 {
			seen |= 1 << typ
			s.applyDescriptor(typ, d)
		}
		off = end
	}
	return s, nil
}

func (s *Sense) applyDescriptor(typ uint8, d []byte) {
	switch typ {
	case senseDescInformation:
		if len(d) >= 12 && d[2]&0x80 != 0 {
			s.InfoValid = true
			s.Info = binary.BigEndian.Uint64(d[4:12])
		}
	case senseDescCmdSpecific:
		if len(d) >= 12 {
			s.CommandSpecific = binary.BigEndian.Uint64(d[4:12])
		}
	case senseDescSKS:
		if len(d) >= 7 && d[4]&sksValid != 0 {
			s.SKSValid = true
			s.SenseKeySpecific = [3]byte{d[4] &^ sksValid, d[5], d[6]}
		}
	case senseDescFRU:
		if len(d) >= 4 {
			s.FRU = d[3]
		}
	case senseDescStream:
		if len(d) >= 4 {
			s.FileMark = d[3]&0x80 != 0
			s.EOM = d[3]&0x40 != 0
			s.ILI = s.ILI || d[3]&0x20 != 0
		}
	case senseDescBlock:
		if len(d) >= 4 {
			s.ILI = s.ILI || d[3]&0x20 != 0
		}
	}
}

// Marshal encodes s in the format its ResponseCode names, as a target
// would send it: 18 bytes of fixed format, or a descriptor format header
// followed by the descriptors for the fields that are set. A fixed format
// INFORMATION or COMMAND-SPECIFIC INFORMATION keeps only the low 32 bits.
func (s *Sense) Marshal() []byte {
	if s.DescriptorFormat() {
		return s.marshalDescriptor()
	}
	b := make([]byte, fixedSenseLen)
	b[0] = s.ResponseCode & 0x7f
	if s.ResponseCode != SenseFixedDeferred {
		b[0] = SenseFixedCurrent
	}
	if s.InfoValid {
		b[0] |= 0x80
		binary.BigEndian.PutUint32(b[3:7], uint32(s.Info))
	}
	b[2] = byte(s.Key & 0x0f)
	if s.FileMark {
		b[2] |= 0x80
	}
	if s.EOM {
		b[2] |= 0x40
	}
	if s.ILI {
		b[2] |= 0x20
	}
	b[7] = fixedSenseLen - 8
	binary.BigEndian.PutUint32(b[8:12], uint32(s.CommandSpecific))
	b[12], b[13], b[14] = s.ASC, s.ASCQ, s.FRU
	if s.SKSValid {
		b[15] = s.SenseKeySpecific[0] | sksValid
		b[16], b[17] = s.SenseKeySpecific[1], s.SenseKeySpecific[2]
	}
	return b
}

func (s *Sense) marshalDescriptor() []byte {
	b := make([]byte, descriptorHeaderLen, 64)
	b[0] = s.ResponseCode
	b[1] = byte(s.Key & 0x0f)
	b[2], b[3] = s.ASC, s.ASCQ
	if s.InfoValid {
		b = append(b, senseDescInformation, 0x0a, 0x80, 0)
		b = binary.BigEndian.AppendUint64(b, s.Info)
	}
	if s.CommandSpecific != 0 {
		b = append(b, senseDescCmdSpecific, 0x0a, 0, 0)
		b = binary.BigEndian.AppendUint64(b, s.CommandSpecific)
	}
	if s.SKSValid {
		k := s.SenseKeySpecific
		b = append(b, senseDescSKS, 0x06, 0, 0, k[0]|sksValid, k[1], k[2], 0)
	}
	if s.FRU != 0 {
		b = append(b, senseDescFRU, 0x02, 0, s.FRU)
	}
	switch {
	case s.FileMark || s.EOM:
		var f byte
		if s.FileMark {
			f |= 0x80
		}
		if s.EOM {
			f |= 0x40
		}
		if s.ILI {
			f |= 0x20
		}
		b = append(b, senseDescStream, 0x02, 0, f)
	case s.ILI:
		b = append(b, senseDescBlock, 0x02, 0, 0x20)
	}
	b[7] = byte(len(b) - descriptorHeaderLen)
	return b
}

// ParseSenseSegment extracts the sense data from the data segment of an
// iSCSI SCSI Response PDU (RFC 7143 11.4.7): a two-byte SenseLength
// followed by the sense bytes, possibly followed by response data that this
// function ignores. An empty segment yields no sense and no error. The
// result aliases seg.
func ParseSenseSegment(seg []byte) ([]byte, error) {
	if len(seg) == 0 {
		return nil, nil
	}
	if len(seg) < 2 {
		return nil, fmt.Errorf("parse sense segment: %d bytes, SenseLength needs 2: %w", len(seg), ErrShortData)
	}
	n := int(binary.BigEndian.Uint16(seg[0:2]))
	if 2+n > len(seg) {
		return nil, fmt.Errorf("parse sense segment: SenseLength %d, %d bytes follow: %w", n, len(seg)-2, ErrShortData)
	}
	return seg[2 : 2+n], nil
}
