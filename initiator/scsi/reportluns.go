package scsi

import (
	"encoding/binary"
	"fmt"
)

// Select report values for REPORT LUNS (SPC-4 6.33).
const (
	ReportLUNsDefault     uint8  = 0x00 // logical units, no well-known LUNs
	ReportLUNsWellKnown   uint8  = 0x01
	ReportLUNsAll         uint8  = 0x02
	reportLUNsHeaderLen          = 8
	reportLUNsMinAllocLen uint32 = 16
)

// ReportLUNsData is the parameter data of REPORT LUNS.
type ReportLUNsData struct {
	// ListLength is the LUN LIST LENGTH the target reported, in bytes. When
	// it exceeds what arrived, Truncated is set and the command should be
	// repeated with an allocation length of at least ListLength+8.
	ListLength uint32
	LUNs       []LUN
	Truncated  bool
}

// AllocationLength returns the allocation length that holds the whole
// list.
func (r *ReportLUNsData) AllocationLength() uint32 {
	return max(r.ListLength+reportLUNsHeaderLen, reportLUNsMinAllocLen)
}

// ParseReportLUNs decodes REPORT LUNS parameter data. Fewer bytes than the
// LUN LIST LENGTH announces are not an error (the allocation length was too
// small); the LUNs that arrived whole are returned with Truncated set.
func ParseReportLUNs(b []byte) (ReportLUNsData, error) {
	if len(b) < reportLUNsHeaderLen {
		return ReportLUNsData{}, fmt.Errorf("parse REPORT LUNS data: %d bytes, header needs %d: %w",
			len(b), reportLUNsHeaderLen, ErrShortData)
	}
	r := ReportLUNsData{ListLength: binary.BigEndian.Uint32(b[0:4])}
	if r.ListLength%8 != 0 {
		return ReportLUNsData{}, fmt.Errorf("parse REPORT LUNS data: LUN LIST LENGTH %d is not a multiple of 8: %w",
			r.ListLength, ErrMalformed)
	}
	avail := uint64(len(b) - reportLUNsHeaderLen)
	if uint64(r.ListLength) > avail {
		r.Truncated = true
	} else {
		avail = uint64(r.ListLength)
	}
	r.LUNs = make([]LUN, avail/8)
	for i := range r.LUNs {
		copy(r.LUNs[i][:], b[reportLUNsHeaderLen+8*i:])
	}
	return r, nil
}

// Marshal encodes the LUN list as a target sends it; ListLength and
// Truncated are ignored and derived from LUNs.
func (r *ReportLUNsData) Marshal() []byte {
	b := make([]byte, reportLUNsHeaderLen+8*len(r.LUNs))
	binary.BigEndian.PutUint32(b[0:4], uint32(8*len(r.LUNs)))
	for i, l := range r.LUNs {
		copy(b[reportLUNsHeaderLen+8*i:], l[:])
	}
	return b
}
