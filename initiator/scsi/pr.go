package scsi

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// This file holds PERSISTENT RESERVE IN and OUT (SPC-4 6.15, 6.16): the
// CDBs, the 24-byte parameter list of OUT, and the replies of IN's READ
// KEYS, READ RESERVATION and READ FULL STATUS.

// PRInAction is a PERSISTENT RESERVE IN service action.
type PRInAction uint8

// PERSISTENT RESERVE IN service actions (SPC-4 6.15.1).
const (
	PRInReadKeys           PRInAction = 0x00
	PRInReadReservation    PRInAction = 0x01
	PRInReportCapabilities PRInAction = 0x02
	PRInReadFullStatus     PRInAction = 0x03
)

// PROutAction is a PERSISTENT RESERVE OUT service action.
type PROutAction uint8

// PERSISTENT RESERVE OUT service actions (SPC-4 6.16.2).
const (
	PROutRegister                  PROutAction = 0x00
	PROutReserve                   PROutAction = 0x01
	PROutRelease                   PROutAction = 0x02
	PROutClear                     PROutAction = 0x03
	PROutPreempt                   PROutAction = 0x04
	PROutPreemptAndAbort           PROutAction = 0x05
	PROutRegisterAndIgnoreExisting PROutAction = 0x06
)

var prOutNames = map[PROutAction]string{
	PROutRegister:                  "REGISTER",
	PROutReserve:                   "RESERVE",
	PROutRelease:                   "RELEASE",
	PROutClear:                     "CLEAR",
	PROutPreempt:                   "PREEMPT",
	PROutPreemptAndAbort:           "PREEMPT AND ABORT",
	PROutRegisterAndIgnoreExisting: "REGISTER AND IGNORE EXISTING KEY",
}

// String returns the service action's name as SPC-4 spells it.
func (a PROutAction) String() string {
	if s, ok := prOutNames[a]; ok {
		return s
	}
	return fmt.Sprintf("PERSISTENT RESERVE OUT service action 0x%02x", uint8(a))
}

// PRType is a persistent reservation's TYPE (SPC-4 6.15.3.4, table 169).
type PRType uint8

// Persistent reservation types.
const (
	PRWriteExclusive                 PRType = 0x1
	PRExclusiveAccess                PRType = 0x3
	PRWriteExclusiveRegistrantsOnly  PRType = 0x5
	PRExclusiveAccessRegistrantsOnly PRType = 0x6
	PRWriteExclusiveAllRegistrants   PRType = 0x7
	PRExclusiveAccessAllRegistrants  PRType = 0x8
)

var prTypeNames = map[PRType]string{
	PRWriteExclusive:                 "Write Exclusive",
	PRExclusiveAccess:                "Exclusive Access",
	PRWriteExclusiveRegistrantsOnly:  "Write Exclusive, Registrants Only",
	PRExclusiveAccessRegistrantsOnly: "Exclusive Access, Registrants Only",
	PRWriteExclusiveAllRegistrants:   "Write Exclusive, All Registrants",
	PRExclusiveAccessAllRegistrants:  "Exclusive Access, All Registrants",
}

// String returns the type's name as SPC-4 spells it.
func (t PRType) String() string {
	if s, ok := prTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("reservation type 0x%x", uint8(t))
}

// prScopeLU is the only SCOPE SPC-4 defines: the whole logical unit.
const prScopeLU = 0x0

// PersistentReserveIn builds PERSISTENT RESERVE IN (SPC-4 6.15) for action,
// with an allocation length of alloc bytes.
func PersistentReserveIn(action PRInAction, alloc uint16) CDB {
	c := newCDB(OpPersistentReserveIn, 10)
	c.b[1] = uint8(action) & 0x1f
	binary.BigEndian.PutUint16(c.b[7:9], alloc)
	return c
}

// PersistentReserveOut builds PERSISTENT RESERVE OUT (SPC-4 6.16) for
// action with reservation type typ (RESERVE, RELEASE and the PREEMPTs read
// it; the others ignore it). The parameter list that follows as Data-Out
// is PROutParameters.Marshal's 24 bytes.
func PersistentReserveOut(action PROutAction, typ PRType) CDB {
	c := newCDB(OpPersistentReserveOut, 10)
	c.b[1] = uint8(action) & 0x1f
	c.b[2] = prScopeLU<<4 | uint8(typ)&0x0f
	binary.BigEndian.PutUint32(c.b[5:9], PROutParameterLen)
	return c
}

// PROutParameterLen is the length of PERSISTENT RESERVE OUT's basic
// parameter list (without transport IDs).
const PROutParameterLen = 24

// PROutParameters is PERSISTENT RESERVE OUT's basic parameter list (SPC-4
// 6.16.3): the caller's registered key, the key the action registers or
// preempts, and the flags. Key 0 means none.
type PROutParameters struct {
	Key       uint64 // RESERVATION KEY: the key the I_T nexus is registered with
	ActionKey uint64 // SERVICE ACTION RESERVATION KEY: new key, or the key to preempt
	AllTgPt   bool   // ALL_TG_PT: register on every target port of the initiator port
	APTPL     bool   // ACTIVATE PERSIST THROUGH POWER LOSS
}

// Marshal returns the 24-byte parameter list.
func (p PROutParameters) Marshal() []byte {
	b := make([]byte, PROutParameterLen)
	binary.BigEndian.PutUint64(b[0:8], p.Key)
	binary.BigEndian.PutUint64(b[8:16], p.ActionKey)
	if p.AllTgPt {
		b[20] |= 0x04
	}
	if p.APTPL {
		b[20] |= 0x01
	}
	return b
}

// prInHeaderLen is the PRGENERATION and ADDITIONAL LENGTH that start every
// PERSISTENT RESERVE IN reply.
const prInHeaderLen = 8

// prInHeader checks b's header and returns the generation and the reply's
// bytes after the header, cut to what b holds. truncated says the target
// had more than the allocation length let through.
func prInHeader(what string, b []byte) (gen uint32, body []byte, truncated bool, err error) {
	if len(b) < prInHeaderLen {
		return 0, nil, false, fmt.Errorf("parse %s: %d bytes, header needs %d: %w", what, len(b), prInHeaderLen, ErrShortData)
	}
	gen = binary.BigEndian.Uint32(b[0:4])
	n := binary.BigEndian.Uint32(b[4:8])
	body = b[prInHeaderLen:]
	if uint64(n) > uint64(len(body)) {
		return gen, body, true, nil
	}
	return gen, body[:n], false, nil
}

// PRKeys is the reply to READ KEYS (SPC-4 6.15.2): the registered keys,
// one per registered I_T nexus.
type PRKeys struct {
	Generation uint32
	Keys       []uint64
	Truncated  bool // the target had more keys than the allocation length held
}

// ParsePRKeys decodes a READ KEYS reply.
func ParsePRKeys(b []byte) (PRKeys, error) {
	gen, body, trunc, err := prInHeader("READ KEYS", b)
	if err != nil {
		return PRKeys{}, err
	}
	if !trunc && len(body)%8 != 0 {
		return PRKeys{}, fmt.Errorf("parse READ KEYS: key list of %d bytes is not a multiple of 8: %w", len(body), ErrMalformed)
	}
	k := PRKeys{Generation: gen, Truncated: trunc}
	for o := 0; o+8 <= len(body); o += 8 {
		k.Keys = append(k.Keys, binary.BigEndian.Uint64(body[o:o+8]))
	}
	return k, nil
}

// PRReservation is the reply to READ RESERVATION (SPC-4 6.15.3): the
// holder's key and the type, if the logical unit is reserved.
type PRReservation struct {
	Generation uint32
	Reserved   bool
	Key        uint64 // the reservation holder's key (0 for the all-registrants types)
	Type       PRType
}

// ParsePRReservation decodes a READ RESERVATION reply.
func ParsePRReservation(b []byte) (PRReservation, error) {
	gen, body, trunc, err := prInHeader("READ RESERVATION", b)
	if err != nil {
		return PRReservation{}, err
	}
	r := PRReservation{Generation: gen}
	switch {
	case len(body) == 0 && !trunc:
		return r, nil
	case len(body) < 16:
		return PRReservation{}, fmt.Errorf("parse READ RESERVATION: reservation descriptor of %d bytes, want 16: %w", len(body), ErrMalformed)
	}
	r.Reserved = true
	r.Key = binary.BigEndian.Uint64(body[0:8])
	r.Type = PRType(body[13] & 0x0f)
	if scope := body[13] >> 4; scope != prScopeLU {
		return PRReservation{}, fmt.Errorf("parse READ RESERVATION: scope 0x%x, only the logical unit's (0) is defined: %w", scope, ErrMalformed)
	}
	return r, nil
}

// PRRegistrant is one descriptor of READ FULL STATUS (SPC-4 6.15.5): a
// registered I_T nexus, its key, and whether it holds the reservation.
type PRRegistrant struct {
	Key              uint64
	AllTgPt          bool
	Holder           bool   // R_HOLDER
	Type             PRType // the reservation's type when Holder
	RelativePortID   uint16 // RELATIVE TARGET PORT IDENTIFIER (when !AllTgPt)
	TransportID      []byte // the initiator port's TransportID
	InitiatorName    string // from an iSCSI TransportID: the iSCSI name ("" for other protocols)
	InitiatorSession string // from an iSCSI TransportID of format 01: the ISID as the target wrote it ("0x...")
}

// PRStatus is the reply to READ FULL STATUS.
type PRStatus struct {
	Generation  uint32
	Registrants []PRRegistrant
	Truncated   bool
}

// prFullStatusDescLen is a READ FULL STATUS descriptor without its TransportID.
const prFullStatusDescLen = 24

// ParsePRStatus decodes a READ FULL STATUS reply.
func ParsePRStatus(b []byte) (PRStatus, error) {
	gen, body, trunc, err := prInHeader("READ FULL STATUS", b)
	if err != nil {
		return PRStatus{}, err
	}
	s := PRStatus{Generation: gen, Truncated: trunc}
	for o := 0; o < len(body); {
		d := body[o:]
		if len(d) < prFullStatusDescLen {
			if trunc {
				break
			}
			return PRStatus{}, fmt.Errorf("parse READ FULL STATUS: descriptor at %d has %d bytes, needs %d: %w", o, len(d), prFullStatusDescLen, ErrMalformed)
		}
		n := int(binary.BigEndian.Uint32(d[20:24]))
		if n > len(d)-prFullStatusDescLen {
			if trunc {
				break
			}
			return PRStatus{}, fmt.Errorf("parse READ FULL STATUS: descriptor at %d: TransportID of %d bytes, %d left: %w", o, n, len(d)-prFullStatusDescLen, ErrMalformed)
		}
		r := PRRegistrant{
			Key:            binary.BigEndian.Uint64(d[0:8]),
			AllTgPt:        d[12]&0x02 != 0,
			Holder:         d[12]&0x01 != 0,
			Type:           PRType(d[13] & 0x0f),
			RelativePortID: binary.BigEndian.Uint16(d[18:20]),
			TransportID:    append([]byte(nil), d[prFullStatusDescLen:prFullStatusDescLen+n]...),
		}
		r.InitiatorName, r.InitiatorSession = parseISCSITransportID(r.TransportID)
		s.Registrants = append(s.Registrants, r)
		o += prFullStatusDescLen + n
	}
	return s, nil
}

// protocolISCSI is the PROTOCOL IDENTIFIER of iSCSI (SPC-4 7.6.1).
const protocolISCSI = 0x5

// parseISCSITransportID returns the iSCSI name and, for format 01, the
// ISID part of an iSCSI TransportID (SPC-4 7.6.4.6): NUL-terminated UTF-8
// after a 4-byte header, "NAME,i,0xISID" in format 01. Anything else gives
// empty strings.
func parseISCSITransportID(t []byte) (name, isid string) {
	if len(t) < 4 || t[0]&0x0f != protocolISCSI {
		return "", ""
	}
	n := int(binary.BigEndian.Uint16(t[2:4]))
	s := t[4:]
	if n < len(s) {
		s = s[:n]
	}
	if i := strings.IndexByte(string(s), 0); i >= 0 {
		s = s[:i]
	}
	name = string(s)
	if t[0]>>6 == 1 {
		if i := strings.Index(name, ",i,"); i >= 0 {
			name, isid = name[:i], name[i+3:]
		}
	}
	return name, isid
}

// ISCSITransportID builds the format-00 iSCSI TransportID of name (the
// form a target reports for a registration through an iSCSI initiator
// port; a test's fake target uses it).
func ISCSITransportID(name string) []byte {
	n := len(name) + 1 // the NUL
	n += (4 - n%4) % 4 // a multiple of 4 (SPC-4 7.6.4.6)
	b := make([]byte, 4+n)
	b[0] = protocolISCSI
	binary.BigEndian.PutUint16(b[2:4], uint16(n))
	copy(b[4:], name)
	return b
}

// Marshal encodes s as a READ FULL STATUS reply (the inverse of
// ParsePRStatus for untruncated replies; tests and fake targets use it).
func (s PRStatus) Marshal() []byte {
	b := make([]byte, prInHeaderLen)
	binary.BigEndian.PutUint32(b[0:4], s.Generation)
	for _, r := range s.Registrants {
		d := make([]byte, prFullStatusDescLen)
		binary.BigEndian.PutUint64(d[0:8], r.Key)
		if r.AllTgPt {
			d[12] |= 0x02
		}
		if r.Holder {
			d[12] |= 0x01
			d[13] = uint8(r.Type) & 0x0f
		}
		binary.BigEndian.PutUint16(d[18:20], r.RelativePortID)
		binary.BigEndian.PutUint32(d[20:24], uint32(len(r.TransportID)))
		b = append(b, d...)
		b = append(b, r.TransportID...)
	}
	binary.BigEndian.PutUint32(b[4:8], uint32(len(b)-prInHeaderLen))
	return b
}
