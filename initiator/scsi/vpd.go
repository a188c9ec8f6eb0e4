package scsi

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Vital product data page codes (SPC-4 7.8, SBC-4 6.6).
const (
	VPDSupportedPages             uint8 = 0x00
	VPDUnitSerialNumber           uint8 = 0x80
	VPDDeviceIdentification       uint8 = 0x83
	VPDBlockLimits                uint8 = 0xb0
	VPDBlockDeviceCharacteristics uint8 = 0xb1
	VPDLogicalBlockProvisioning   uint8 = 0xb2
)

const vpdHeaderLen = 4

// VPDLength returns the full length of the VPD page that starts in b (its
// PAGE LENGTH plus the 4-byte header), so that a caller whose allocation
// length was too small can ask again with enough.
func VPDLength(b []byte) (int, error) {
	if len(b) < vpdHeaderLen {
		return 0, fmt.Errorf("parse VPD page header: %d bytes, need %d: %w", len(b), vpdHeaderLen, ErrShortData)
	}
	return vpdHeaderLen + int(binary.BigEndian.Uint16(b[2:4])), nil
}

// vpdBody checks the header of VPD page page and returns the page's bytes
// after the header, cut to its PAGE LENGTH.
func vpdBody(b []byte, page uint8) ([]byte, error) {
	n, err := VPDLength(b)
	if err != nil {
		return nil, fmt.Errorf("parse VPD page 0x%02x: %w", page, err)
	}
	if b[1] != page {
		return nil, fmt.Errorf("parse VPD page 0x%02x: got page 0x%02x: %w", page, b[1], ErrMalformed)
	}
	if n > len(b) {
		return nil, fmt.Errorf("parse VPD page 0x%02x: page length needs %d bytes, have %d: %w",
			page, n, len(b), ErrShortData)
	}
	return b[vpdHeaderLen:n], nil
}

// vpdPage prepends a VPD header to body. The peripheral qualifier and type
// are 0 (connected disk).
func vpdPage(page uint8, body []byte) []byte {
	b := make([]byte, vpdHeaderLen+len(body))
	b[1] = page
	binary.BigEndian.PutUint16(b[2:4], uint16(len(body)))
	copy(b[vpdHeaderLen:], body)
	return b
}

// ParseSupportedVPDPages decodes VPD page 0x00, the list of supported page
// codes.
func ParseSupportedVPDPages(b []byte) ([]uint8, error) {
	body, err := vpdBody(b, VPDSupportedPages)
	if err != nil {
		return nil, err
	}
	return append([]uint8{}, body...), nil
}

// MarshalSupportedVPDPages encodes VPD page 0x00.
func MarshalSupportedVPDPages(pages []uint8) []byte {
	return vpdPage(VPDSupportedPages, pages)
}

// ParseUnitSerialNumber decodes VPD page 0x80 and returns the PRODUCT
// SERIAL NUMBER with surrounding spaces and NULs trimmed.
func ParseUnitSerialNumber(b []byte) (string, error) {
	body, err := vpdBody(b, VPDUnitSerialNumber)
	if err != nil {
		return "", err
	}
	return string(bytes.Trim(body, " \x00")), nil
}

// MarshalUnitSerialNumber encodes VPD page 0x80.
func MarshalUnitSerialNumber(serial string) []byte {
	return vpdPage(VPDUnitSerialNumber, []byte(serial))
}

// BlockLimits is VPD page 0xB0 (SBC-4 6.6.4). Lengths are in logical
// blocks; zero means the target reports no limit. Pages from SBC-2 era
// targets end after OptimalTransferLength; the fields after it read zero.
type BlockLimits struct {
	WSNZ                             bool // WRITE SAME with 0 blocks is not allowed
	MaxCompareAndWriteLength         uint8
	OptimalTransferLengthGranularity uint16
	MaxTransferLength                uint32
	OptimalTransferLength            uint32
	MaxPrefetchLength                uint32
	MaxUnmapLBACount                 uint32
	MaxUnmapDescriptorCount          uint32
	OptimalUnmapGranularity          uint32
	UGAValid                         bool
	UnmapGranularityAlignment        uint32 // valid when UGAValid
	MaxWriteSameLength               uint64
}

const blockLimitsLen = 0x3c // PAGE LENGTH of VPD 0xB0 in SBC-3 and SBC-4

// ParseBlockLimits decodes VPD page 0xB0.
func ParseBlockLimits(b []byte) (BlockLimits, error) {
	body, err := vpdBody(b, VPDBlockLimits)
	if err != nil {
		return BlockLimits{}, err
	}
	// Offsets below are page offsets, 4 more than body offsets.
	var p [vpdHeaderLen + blockLimitsLen]byte
	copy(p[vpdHeaderLen:], body)
	if len(body) < 12 {
		return BlockLimits{}, fmt.Errorf("parse VPD page 0xb0: page length %d, need at least 12: %w",
			len(body), ErrShortData)
	}
	be := binary.BigEndian
	return BlockLimits{
		WSNZ:                             p[4]&0x01 != 0,
		MaxCompareAndWriteLength:         p[5],
		OptimalTransferLengthGranularity: be.Uint16(p[6:8]),
		MaxTransferLength:                be.Uint32(p[8:12]),
		OptimalTransferLength:            be.Uint32(p[12:16]),
		MaxPrefetchLength:                be.Uint32(p[16:20]),
		MaxUnmapLBACount:                 be.Uint32(p[20:24]),
		MaxUnmapDescriptorCount:          be.Uint32(p[24:28]),
		OptimalUnmapGranularity:          be.Uint32(p[28:32]),
		UGAValid:                         p[32]&0x80 != 0,
		UnmapGranularityAlignment:        be.Uint32(p[32:36]) & 0x7fffffff,
		MaxWriteSameLength:               be.Uint64(p[36:44]),
	}, nil
}

// Marshal encodes VPD page 0xB0 with a PAGE LENGTH of 0x3C.
func (l *BlockLimits) Marshal() []byte {
	b := make([]byte, vpdHeaderLen+blockLimitsLen)
	b[1] = VPDBlockLimits
	be := binary.BigEndian
	be.PutUint16(b[2:4], blockLimitsLen)
	b[4] = flag(l.WSNZ, 0x01)
	b[5] = l.MaxCompareAndWriteLength
	be.PutUint16(b[6:8], l.OptimalTransferLengthGranularity)
	be.PutUint32(b[8:12], l.MaxTransferLength)
	be.PutUint32(b[12:16], l.OptimalTransferLength)
	be.PutUint32(b[16:20], l.MaxPrefetchLength)
	be.PutUint32(b[20:24], l.MaxUnmapLBACount)
	be.PutUint32(b[24:28], l.MaxUnmapDescriptorCount)
	be.PutUint32(b[28:32], l.OptimalUnmapGranularity)
	be.PutUint32(b[32:36], l.UnmapGranularityAlignment&0x7fffffff)
	b[32] |= flag(l.UGAValid, 0x80)
	be.PutUint64(b[36:44], l.MaxWriteSameLength)
	return b
}

// ProvisioningType is the PROVISIONING TYPE of VPD page 0xB2.
type ProvisioningType uint8

// Provisioning types (SBC-4 table 262).
const (
	ProvisioningFull     ProvisioningType = 0 // fully provisioned, or not reported
	ProvisioningResource ProvisioningType = 1
	ProvisioningThin     ProvisioningType = 2
)

// LogicalBlockProvisioning is VPD page 0xB2 (SBC-4 6.6.6).
type LogicalBlockProvisioning struct {
	ThresholdExponent uint8
	LBPU              bool // UNMAP supported
	LBPWS             bool // WRITE SAME(16) with UNMAP supported
	LBPWS10           bool // WRITE SAME(10) with UNMAP supported
	// LBPRZ is the 3-bit LBPRZ field; see ReadsZeros.
	LBPRZ               uint8
	ANCSup              bool // ANCHOR supported
	DP                  bool // a provisioning group descriptor follows
	MinimumPercentage   uint8
	Type                ProvisioningType
	ThresholdPercentage uint8
}

// ReadsZeros reports whether unmapped blocks read back as zeros: LBPRZ
// 001b in SBC-4, the single LBPRZ bit of SBC-3 (the same bit).
func (p *LogicalBlockProvisioning) ReadsZeros() bool { return p.LBPRZ&1 != 0 }

// ParseLogicalBlockProvisioning decodes VPD page 0xB2; a provisioning
// group descriptor, if present, is not decoded.
func ParseLogicalBlockProvisioning(b []byte) (LogicalBlockProvisioning, error) {
	body, err := vpdBody(b, VPDLogicalBlockProvisioning)
	if err != nil {
		return LogicalBlockProvisioning{}, err
	}
	if len(body) < 4 {
		return LogicalBlockProvisioning{}, fmt.Errorf("parse VPD page 0xb2: page length %d, need 4: %w",
			len(body), ErrShortData)
	}
	return LogicalBlockProvisioning{
		ThresholdExponent:   body[0],
		LBPU:                body[1]&0x80 != 0,
		LBPWS:               body[1]&0x40 != 0,
		LBPWS10:             body[1]&0x20 != 0,
		LBPRZ:               body[1] >> 2 & 7,
		ANCSup:              body[1]&0x02 != 0,
		DP:                  body[1]&0x01 != 0,
		MinimumPercentage:   body[2] >> 3,
		Type:                ProvisioningType(body[2] & 7),
		ThresholdPercentage: body[3],
	}, nil
}

// Marshal encodes VPD page 0xB2 with a PAGE LENGTH of 4 (no provisioning
// group descriptor, whatever DP says).
func (p *LogicalBlockProvisioning) Marshal() []byte {
	return vpdPage(VPDLogicalBlockProvisioning, []byte{
		p.ThresholdExponent,
		flag(p.LBPU, 0x80) | flag(p.LBPWS, 0x40) | flag(p.LBPWS10, 0x20) |
			(p.LBPRZ&7)<<2 | flag(p.ANCSup, 0x02) | flag(p.DP, 0x01),
		p.MinimumPercentage<<3 | byte(p.Type&7),
		p.ThresholdPercentage,
	})
}
