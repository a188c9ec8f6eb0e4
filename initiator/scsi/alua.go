package scsi

import (
	"encoding/binary"
	"fmt"
)

// Asymmetric logical unit access (ALUA, SPC-4 5.16): a LU reached through
// several target port groups, each in its own access state. The standard
// INQUIRY's TPGS field says whether the LU has it (InquiryData.TPGS);
// REPORT TARGET PORT GROUPS lists the groups and their states; the states'
// changes arrive as UNIT ATTENTION 2A/06, and a command sent to a group that
// cannot serve it ends in NOT READY 04/0A, 04/0B or 04/0C.

// TPGS values of the standard INQUIRY data (SPC-4 table 142).
const (
	TPGSNone     uint8 = 0 // no asymmetric access
	TPGSImplicit uint8 = 1 // the target changes states itself
	TPGSExplicit uint8 = 2 // SET TARGET PORT GROUPS only
	TPGSBoth     uint8 = 3
)

// AccessState is an ASYMMETRIC ACCESS STATE (SPC-4 table 203).
type AccessState uint8

// Asymmetric access states.
const (
	AccessActiveOptimized    AccessState = 0x0
	AccessActiveNonOptimized AccessState = 0x1
	AccessStandby            AccessState = 0x2
	AccessUnavailable        AccessState = 0x3
	AccessLBADependent       AccessState = 0x4
	AccessOffline            AccessState = 0xe
	AccessTransitioning      AccessState = 0xf
)

func (a AccessState) String() string {
	switch a {
	case AccessActiveOptimized:
		return "active/optimized"
	case AccessActiveNonOptimized:
		return "active/non-optimized"
	case AccessStandby:
		return "standby"
	case AccessUnavailable:
		return "unavailable"
	case AccessLBADependent:
		return "lba-dependent"
	case AccessOffline:
		return "offline"
	case AccessTransitioning:
		return "transitioning"
	}
	return fmt.Sprintf("access state 0x%x", uint8(a))
}

// ServesIO reports whether a group in this state executes reads and writes:
// only the two active states (LBA dependent is left out: which blocks a
// port serves is not known without REPORT REFERRALS).
func (a AccessState) ServesIO() bool {
	return a == AccessActiveOptimized || a == AccessActiveNonOptimized
}

// Parameter data formats of REPORT TARGET PORT GROUPS (SPC-4 6.36).
const (
	rtpgFormatLengthOnly uint8 = 0x00
	rtpgFormatExtended   uint8 = 0x20 // PARAMETER DATA FORMAT 001b in CDB byte 1
	rtpgFormatMask       uint8 = 0x70 // FORMAT TYPE in byte 4 of the data
	rtpgFormatExtHeader  uint8 = 0x10
	rtpgDescriptorLen          = 8
	rtpgPortLen                = 4
	// ReportTargetPortGroupsLength is a first allocation length that holds
	// the groups of every two- to four-port target seen in practice; a
	// longer answer sets Truncated and says how much to ask for.
	ReportTargetPortGroupsLength uint32 = 256
)

// ReportTargetPortGroups builds REPORT TARGET PORT GROUPS, MAINTENANCE
// IN with service action 0x0a (SPC-4 6.36). extended asks for the extended
// header (the implicit transition time); targets that lack it answer in the
// length-only format, which ParseReportTargetPortGroups tells apart.
func ReportTargetPortGroups(extended bool, alloc uint32) CDB {
	c := newCDB(OpMaintenanceIn, 12)
	c.b[1] = saReportTargetPortGroups
	if extended {
		c.b[1] |= rtpgFormatExtended
	}
	binary.BigEndian.PutUint32(c.b[6:10], alloc)
	return c
}

// TargetPortGroup is one target port group descriptor.
type TargetPortGroup struct {
	Preferred bool // PREF: the group the target prefers for this LU
	State     AccessState
	// Supported states: T_SUP, O_SUP, LBD_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP.
	SupportsTransitioning, SupportsOffline, SupportsLBADependent bool
	SupportsUnavailable, SupportsStandby                         bool
	SupportsNonOptimized, SupportsOptimized                      bool
	ID                                                           uint16
	// StatusCode: 0 none, 1 altered by SET TARGET PORT GROUPS, 2 altered by
	// an implicit transition.
	StatusCode     uint8
	VendorSpecific uint8
	// Ports holds the RELATIVE TARGET PORT IDENTIFIERs of the group's ports.
	Ports []uint16
}

// HasPort reports whether the group holds relative target port rtp.
func (g *TargetPortGroup) HasPort(rtp uint16) bool {
	for _, p := range g.Ports {
		if p == rtp {
			return true
		}
	}
	return false
}

// TargetPortGroups is the parameter data of REPORT TARGET PORT GROUPS.
type TargetPortGroups struct {
	// ReturnDataLength is the RETURN DATA LENGTH the target reported. When it
	// exceeds what arrived, Truncated is set and the command should be
	// repeated with AllocationLength.
	ReturnDataLength uint32
	Truncated        bool
	// Extended is set when the data came with the extended header;
	// ImplicitTransitionTime (seconds, 0: unspecified) is only given there.
	Extended               bool
	ImplicitTransitionTime uint8
	Groups                 []TargetPortGroup
}

// AllocationLength returns the allocation length that holds the whole
// answer.
func (t *TargetPortGroups) AllocationLength() uint32 {
	return max(t.ReturnDataLength+4, ReportTargetPortGroupsLength)
}

// GroupOfPort returns the group that holds relative target port rtp.
func (t *TargetPortGroups) GroupOfPort(rtp uint16) (TargetPortGroup, bool) {
	for _, g := range t.Groups {
		if g.HasPort(rtp) {
			return g, true
		}
	}
	return TargetPortGroup{}, false
}

// ParseReportTargetPortGroups decodes REPORT TARGET PORT GROUPS parameter
// data. extended says whether the command asked for the extended header: a
// target that has it sets FORMAT TYPE 001b in byte 4, one that does not
// answers in the length-only format (Linux's scsi_dh_alua tells them apart
// the same way). Fewer bytes than RETURN DATA LENGTH announces are not an
// error: the descriptors that arrived whole are returned with Truncated set.
func ParseReportTargetPortGroups(b []byte, extended bool) (TargetPortGroups, error) {
	if len(b) < 4 {
		return TargetPortGroups{}, fmt.Errorf("parse REPORT TARGET PORT GROUPS data: %d bytes, header needs 4: %w",
			len(b), ErrShortData)
	}
	t := TargetPortGroups{ReturnDataLength: binary.BigEndian.Uint32(b[0:4])}
	end := uint64(len(b))
	if want := uint64(t.ReturnDataLength) + 4; want < end {
		end = want
	} else if want > end {
		t.Truncated = true
	}
	off := uint64(4)
	if extended && end >= 8 && b[4]&rtpgFormatMask == rtpgFormatExtHeader {
		t.Extended = true
		t.ImplicitTransitionTime = b[5]
		off = 8
	}
	for off < end {
		if end-off < rtpgDescriptorLen {
			if !t.Truncated {
				return TargetPortGroups{}, fmt.Errorf("parse REPORT TARGET PORT GROUPS data: descriptor at byte %d cut at %d: %w",
					off, end, ErrMalformed)
			}
			break
		}
		d := b[off : off+rtpgDescriptorLen]
		n := uint64(d[7])
		if end-off-rtpgDescriptorLen < n*rtpgPortLen {
			if !t.Truncated {
				return TargetPortGroups{}, fmt.Errorf("parse REPORT TARGET PORT GROUPS data: group at byte %d lists %d ports, %d bytes left: %w",
					off, n, end-off-rtpgDescriptorLen, ErrMalformed)
			}
			break
		}
		g := TargetPortGroup{
			Preferred:             d[0]&0x80 != 0,
			State:                 AccessState(d[0] & 0x0f),
			SupportsTransitioning: d[1]&0x80 != 0,
			SupportsOffline:       d[1]&0x40 != 0,
			SupportsLBADependent:  d[1]&0x10 != 0,
			SupportsUnavailable:   d[1]&0x08 != 0,
			SupportsStandby:       d[1]&0x04 != 0,
			SupportsNonOptimized:  d[1]&0x02 != 0,
			SupportsOptimized:     d[1]&0x01 != 0,
			ID:                    binary.BigEndian.Uint16(d[2:4]),
			StatusCode:            d[5],
			VendorSpecific:        d[6],
		}
		off += rtpgDescriptorLen
		if n > 0 {
			g.Ports = make([]uint16, n)
			for i := range g.Ports {
				g.Ports[i] = binary.BigEndian.Uint16(b[off+2 : off+4])
				off += rtpgPortLen
			}
		}
		t.Groups = append(t.Groups, g)
	}
	return t, nil
}

// Marshal encodes the groups as a target sends them, with the extended
// header when Extended is set; ReturnDataLength and Truncated are derived.
func (t *TargetPortGroups) Marshal() []byte {
	b := make([]byte, 4, 64)
	if t.Extended {
		b = append(b, rtpgFormatExtHeader, t.ImplicitTransitionTime, 0, 0)
	}
	for _, g := range t.Groups {
		var d [rtpgDescriptorLen]byte
		d[0] = uint8(g.State) & 0x0f
		if g.Preferred {
			d[0] |= 0x80
		}
		d[1] = flag(g.SupportsTransitioning, 0x80) | flag(g.SupportsOffline, 0x40) |
			flag(g.SupportsLBADependent, 0x10) | flag(g.SupportsUnavailable, 0x08) |
			flag(g.SupportsStandby, 0x04) | flag(g.SupportsNonOptimized, 0x02) | flag(g.SupportsOptimized, 0x01)
		binary.BigEndian.PutUint16(d[2:4], g.ID)
		d[5] = g.StatusCode
		d[6] = g.VendorSpecific
		d[7] = uint8(len(g.Ports))
		b = append(b, d[:]...)
		for _, p := range g.Ports[:min(len(g.Ports), 255)] {
			b = append(b, 0, 0, byte(p>>8), byte(p))
		}
	}
	binary.BigEndian.PutUint32(b[0:4], uint32(len(b)-4))
	return b
}

// ALUACondition is what a sense tells about asymmetric access.
type ALUACondition uint8

// Conditions, from the senses SPC-4 5.16 defines for ALUA.
const (
	ALUANone ALUACondition = iota
	// ALUATransitioning: NOT READY 04/0A. The group is changing state; the
	// command may be retried on this path after a while or on another.
	ALUATransitioning
	// ALUAStandby: NOT READY 04/0B. This path serves no I/O.
	ALUAStandby
	// ALUAUnavailable: NOT READY 04/0C. This path serves no I/O.
	ALUAUnavailable
	// ALUAStateChanged: UNIT ATTENTION 2A/06. Some group's state changed:
	// read the groups again.
	ALUAStateChanged
	// ALUATransitionFailed: UNIT ATTENTION 2A/07. An implicit transition
	// failed: read the groups again.
	ALUATransitionFailed
)

func (c ALUACondition) String() string {
	switch c {
	case ALUANone:
		return "none"
	case ALUATransitioning:
		return "transitioning"
	case ALUAStandby:
		return "standby"
	case ALUAUnavailable:
		return "unavailable"
	case ALUAStateChanged:
		return "access state changed"
	case ALUATransitionFailed:
		return "implicit transition failed"
	}
	return fmt.Sprintf("alua condition %d", uint8(c))
}

// ALUA classifies the sense: one of the conditions above, or ALUANone. A
// deferred sense is about an earlier command and is not classified.
func (s *Sense) ALUA() ALUACondition {
	if s.Deferred() {
		return ALUANone
	}
	switch {
	case s.Key == KeyNotReady && s.ASC == 0x04 && s.ASCQ == 0x0a:
		return ALUATransitioning
	case s.Key == KeyNotReady && s.ASC == 0x04 && s.ASCQ == 0x0b:
		return ALUAStandby
	case s.Key == KeyNotReady && s.ASC == 0x04 && s.ASCQ == 0x0c:
		return ALUAUnavailable
	case s.Key == KeyUnitAttention && s.ASC == 0x2a && s.ASCQ == 0x06:
		return ALUAStateChanged
	case s.Key == KeyUnitAttention && s.ASC == 0x2a && s.ASCQ == 0x07:
		return ALUATransitionFailed
	}
	return ALUANone
}
