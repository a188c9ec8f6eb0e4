package pdu

import (
	"encoding/binary"
	"fmt"
)

// PDU is one iSCSI PDU: the BHS, the raw Additional Header Segments and the
// data segment (without padding or digests, which belong to the transport).
type PDU struct {
	BHS  BHS
	AHS  []byte
	Data []byte
}

// NewPDU returns a PDU whose BHS is marshalled from h and whose lengths are
// set from ahs and data.
func NewPDU(h interface{ Marshal(*BHS) }, data []byte) *PDU {
	p := &PDU{Data: data}
	h.Marshal(&p.BHS)
	p.BHS.SetDataSegmentLength(len(data))
	return p
}

// PadLen returns the padding that brings n to a multiple of 4.
func PadLen(n int) int { return (4 - n&3) & 3 }

// AHS types (RFC 7143 section 11.2.2).
const (
	AHSExtendedCDB     = 1
	AHSBidiReadDataLen = 2
)

// ExtendedCDBAHS encodes the CDB bytes past the first 16 as an AHS.
func ExtendedCDBAHS(cdb []byte) []byte {
	if len(cdb) <= 16 {
		return nil
	}
	rest := cdb[16:]
	n := 4 + len(rest)
	out := make([]byte, n+PadLen(n))
	binary.BigEndian.PutUint16(out, uint16(len(rest)+1))
	out[2] = AHSExtendedCDB
	copy(out[4:], rest)
	return out
}

// BidiReadLengthAHS encodes the Bidirectional Read Expected Data Transfer Length AHS.
func BidiReadLengthAHS(n uint32) []byte {
	out := make([]byte, 8)
	binary.BigEndian.PutUint16(out, 5)
	out[2] = AHSBidiReadDataLen
	binary.BigEndian.PutUint32(out[4:], n)
	return out
}

// AHSSegment is one decoded AHS.
type AHSSegment struct {
	Type     uint8
	Specific []byte // the bytes after the type byte, AHSLength long
}

// ParseAHS splits raw AHS bytes into segments.
func ParseAHS(raw []byte) ([]AHSSegment, error) {
	var segs []AHSSegment
	for len(raw) > 0 {
		if len(raw) < 4 {
			return nil, fmt.Errorf("parse AHS: %d trailing bytes", len(raw))
		}
		l := int(binary.BigEndian.Uint16(raw))
		if l == 0 {
			return nil, fmt.Errorf("parse AHS: zero AHSLength")
		}
		total := 3 + l
		total += PadLen(total)
		if total > len(raw) {
			return nil, fmt.Errorf("parse AHS: AHSLength %d overruns %d bytes", l, len(raw))
		}
		segs = append(segs, AHSSegment{Type: raw[2], Specific: raw[3 : 3+l]})
		raw = raw[total:]
	}
	return segs, nil
}
