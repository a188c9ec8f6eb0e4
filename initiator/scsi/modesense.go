package scsi

import (
	"encoding/binary"
	"fmt"
)

// ModeParameters is the parameter data of MODE SENSE(6) or MODE SENSE(10)
// (SPC-4 7.5.4, 7.5.5): the mode parameter header, block descriptors and
// mode pages.
type ModeParameters struct {
	MediumType uint8
	// DeviceSpecific is the DEVICE-SPECIFIC PARAMETER; for disks see
	// WriteProtected and DPOFUA.
	DeviceSpecific   uint8
	LongLBA          bool   // LONGLBA, MODE SENSE(10) only
	BlockDescriptors []byte // raw, a copy
	Pages            []ModePage
	// Truncated is set when the MODE DATA LENGTH says more data exists than
	// arrived; the pages that arrived whole are in Pages.
	Truncated bool
}

// WriteProtected reports the WP bit of a direct access device: the medium
// is write protected and Linux makes the disk read-only.
func (m *ModeParameters) WriteProtected() bool { return m.DeviceSpecific&0x80 != 0 }

// DPOFUA reports whether the device supports the DPO and FUA bits.
func (m *ModeParameters) DPOFUA() bool { return m.DeviceSpecific&0x10 != 0 }

// Page returns the page with the given code and subpage.
func (m *ModeParameters) Page(code, subpage uint8) (ModePage, bool) {
	for _, p := range m.Pages {
		if p.Code == code && p.Subpage == subpage {
			return p, true
		}
	}
	return ModePage{}, false
}

// ModePage is one mode page. Data holds the page parameters that follow
// the page header (2 bytes, or 4 in sub_page format), so Data[0] is byte 2
// of a page_0 format page.
type ModePage struct {
	Code    uint8
	Subpage uint8
	SPF     bool // sub_page format
	PS      bool // parameters savable
	Data    []byte
}

const (
	modeHeader6Len  = 4
	modeHeader10Len = 8
)

// ParseModeSense6 decodes MODE SENSE(6) parameter data.
func ParseModeSense6(b []byte) (ModeParameters, error) {
	if len(b) < modeHeader6Len {
		return ModeParameters{}, fmt.Errorf("parse MODE SENSE(6) data: %d bytes, header needs %d: %w",
			len(b), modeHeader6Len, ErrShortData)
	}
	m := ModeParameters{MediumType: b[1], DeviceSpecific: b[2]}
	return m, m.parseRest(b, "MODE SENSE(6)", int(b[0])+1, modeHeader6Len, int(b[3]))
}

// ParseModeSense10 decodes MODE SENSE(10) parameter data.
func ParseModeSense10(b []byte) (ModeParameters, error) {
	if len(b) < modeHeader10Len {
		return ModeParameters{}, fmt.Errorf("parse MODE SENSE(10) data: %d bytes, header needs %d: %w",
			len(b), modeHeader10Len, ErrShortData)
	}
	m := ModeParameters{MediumType: b[2], DeviceSpecific: b[3], LongLBA: b[4]&0x01 != 0}
	total := int(binary.BigEndian.Uint16(b[0:2])) + 2
	return m, m.parseRest(b, "MODE SENSE(10)", total, modeHeader10Len, int(binary.BigEndian.Uint16(b[6:8])))
}

// parseRest decodes the block descriptors and pages of data whose MODE
// DATA LENGTH says total bytes exist.
func (m *ModeParameters) parseRest(b []byte, op string, total, hdr, bdLen int) error {
	if total < hdr {
		return fmt.Errorf("parse %s data: MODE DATA LENGTH %d shorter than header: %w", op, total, ErrMalformed)
	}
	if total > len(b) {
		m.Truncated = true
		total = len(b)
	}
	b = b[:total]
	if hdr+bdLen > total {
		if m.Truncated {
			return nil
		}
		return fmt.Errorf("parse %s data: BLOCK DESCRIPTOR LENGTH %d runs past MODE DATA LENGTH: %w",
			op, bdLen, ErrMalformed)
	}
	m.BlockDescriptors = append([]byte(nil), b[hdr:hdr+bdLen]...)
	for off := hdr + bdLen; off < total; {
		p := ModePage{Code: b[off] & 0x3f, PS: b[off]&0x80 != 0, SPF: b[off]&0x40 != 0}
		ph := 2
		if p.SPF {
			ph = 4
		}
		if off+ph > total {
			return m.pageOverrun(op, off)
		}
		var n int
		if p.SPF {
			p.Subpage = b[off+1]
			n = int(binary.BigEndian.Uint16(b[off+2 : off+4]))
		} else {
			n = int(b[off+1])
		}
		if off+ph+n > total {
			return m.pageOverrun(op, off)
		}
		p.Data = append([]byte(nil), b[off+ph:off+ph+n]...)
		m.Pages = append(m.Pages, p)
		off += ph + n
	}
	return nil
}

func (m *ModeParameters) pageOverrun(op string, off int) error {
	if m.Truncated {
		return nil
	}
	return fmt.Errorf("parse %s data: mode page at offset %d runs past MODE DATA LENGTH: %w", op, off, ErrMalformed)
}

// CachingPage is the caching mode page 0x08 (SBC-4 6.5.5).
type CachingPage struct {
	IC   bool // initiator control
	ABPF bool
	CAP  bool
	DISC bool
	SIZE bool
	WCE  bool // write cache enabled: writes need SYNCHRONIZE CACHE or FUA
	MF   bool
	RCD  bool // read cache disabled
}

// ParseCachingPage decodes the caching mode page.
func ParseCachingPage(p ModePage) (CachingPage, error) {
	if p.Code != ModePageCaching || p.SPF {
		return CachingPage{}, fmt.Errorf("parse caching mode page: got page 0x%02x: %w", p.Code, ErrMalformed)
	}
	if len(p.Data) < 1 {
		return CachingPage{}, fmt.Errorf("parse caching mode page: page length %d: %w", len(p.Data), ErrShortData)
	}
	c := p.Data[0]
	return CachingPage{
		IC: c&0x80 != 0, ABPF: c&0x40 != 0, CAP: c&0x20 != 0, DISC: c&0x10 != 0,
		SIZE: c&0x08 != 0, WCE: c&0x04 != 0, MF: c&0x02 != 0, RCD: c&0x01 != 0,
	}, nil
}

// ControlPage is the control mode page 0x0A (SPC-4 7.5.8).
type ControlPage struct {
	TST     uint8 // task set type
	TMFOnly bool
	DPICZ   bool
	DSense  bool // D_SENSE: the target returns descriptor format sense
	GLTSD   bool
	RLEC    bool
	// QueueAlgorithmModifier 0 is restricted reordering, 1 unrestricted.
	QueueAlgorithmModifier uint8
	NUAR                   bool
	QErr                   uint8
	RAC                    bool
	UAIntlckCtrl           uint8
	SWP                    bool // software write protect
	ATO                    bool
	TAS                    bool // task aborted status
	// BusyTimeoutPeriod is in 100 ms units; 0xffff is unlimited.
	BusyTimeoutPeriod uint16
}

// ParseControlPage decodes the control mode page.
func ParseControlPage(p ModePage) (ControlPage, error) {
	if p.Code != ModePageControlMode || p.SPF {
		return ControlPage{}, fmt.Errorf("parse control mode page: got page 0x%02x: %w", p.Code, ErrMalformed)
	}
	d := p.Data
	if len(d) < 4 {
		return ControlPage{}, fmt.Errorf("parse control mode page: page length %d, need 4: %w", len(d), ErrShortData)
	}
	c := ControlPage{
		TST: d[0] >> 5, TMFOnly: d[0]&0x10 != 0, DPICZ: d[0]&0x08 != 0,
		DSense: d[0]&0x04 != 0, GLTSD: d[0]&0x02 != 0, RLEC: d[0]&0x01 != 0,
		QueueAlgorithmModifier: d[1] >> 4, NUAR: d[1]&0x08 != 0, QErr: d[1] >> 1 & 3,
		RAC: d[2]&0x40 != 0, UAIntlckCtrl: d[2] >> 4 & 3, SWP: d[2]&0x08 != 0,
		ATO: d[3]&0x80 != 0, TAS: d[3]&0x40 != 0,
	}
	if len(d) >= 8 {
		c.BusyTimeoutPeriod = binary.BigEndian.Uint16(d[6:8])
	}
	return c, nil
}
