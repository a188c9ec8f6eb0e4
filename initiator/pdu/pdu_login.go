package pdu

// Login and Text PDUs (RFC 7143 sections 11.10 to 11.13).

// Login stages (CSG and NSG values).
const (
	StageSecurity    = 0
	StageOperational = 1
	StageFullFeature = 3
)

// ISID is the initiator part of the session identifier (RFC 7143 section 11.12.5).
type ISID [6]byte

// LoginRequest is the Login Request BHS (opcode 0x03, always immediate).
type LoginRequest struct {
	Transit, Continue      bool
	CSG, NSG               uint8
	VersionMax, VersionMin uint8
	ISID                   ISID
	TSIH                   uint16
	ITT                    uint32
	CID                    uint16
	CmdSN, ExpStatSN       uint32
}

// Marshal encodes the Login Request into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (l *LoginRequest) Marshal(b *BHS) {
	b.reset(OpLoginReq, true)
	b[1] = (l.CSG&3)<<2 | l.NSG&3
	if l.Transit {
		b[1] |= 0x80
	}
	if l.Continue {
		b[1] |= 0x40
	}
	b[2], b[3] = l.VersionMax, l.VersionMin
	copy(b[8:14], l.ISID[:])
	b.put16(14, l.TSIH)
	b.put32(16, l.ITT)
	b.put16(20, l.CID)
	b.put32(24, l.CmdSN)
	b.put32(28, l.ExpStatSN)
}

// Unmarshal decodes a Login Request BHS. Another opcode is a *ProtocolError.
func (l *LoginRequest) Unmarshal(b *BHS) error {
	if err := b.expect(OpLoginReq); err != nil {
		return err
	}
	*l = LoginRequest{Transit: b[1]&0x80 != 0, Continue: b[1]&0x40 != 0,
		CSG: b[1] >> 2 & 3, NSG: b[1] & 3, VersionMax: b[2], VersionMin: b[3],
		TSIH: b.u16(14), ITT: b.ITT(), CID: b.u16(20), CmdSN: b.u32(24), ExpStatSN: b.u32(28)}
	copy(l.ISID[:], b[8:14])
	return nil
}

// LoginResponse is the Login Response BHS (opcode 0x23).
type LoginResponse struct {
	Transit, Continue         bool
	CSG, NSG                  uint8
	VersionMax, VersionActive uint8
	ISID                      ISID
	TSIH                      uint16
	ITT                       uint32
	TargetSNs
	StatusClass, StatusDetail uint8
}

// Marshal encodes the Login Response into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (l *LoginResponse) Marshal(b *BHS) {
	b.reset(OpLoginResp, false)
	b[1] = (l.CSG&3)<<2 | l.NSG&3
	if l.Transit {
		b[1] |= 0x80
	}
	if l.Continue {
		b[1] |= 0x40
	}
	b[2], b[3] = l.VersionMax, l.VersionActive
	copy(b[8:14], l.ISID[:])
	b.put16(14, l.TSIH)
	b.put32(16, l.ITT)
	l.TargetSNs.marshal(b)
	b[36], b[37] = l.StatusClass, l.StatusDetail
}

// Unmarshal decodes a Login Response BHS. Another opcode is a *ProtocolError.
// So is a header with both T and C bits set or the reserved stage 2.
func (l *LoginResponse) Unmarshal(b *BHS) error {
	if err := b.expect(OpLoginResp); err != nil {
		return err
	}
	*l = LoginResponse{Transit: b[1]&0x80 != 0, Continue: b[1]&0x40 != 0,
		CSG: b[1] >> 2 & 3, NSG: b[1] & 3, VersionMax: b[2], VersionActive: b[3],
		TSIH: b.u16(14), ITT: b.ITT(), StatusClass: b[36], StatusDetail: b[37]}
	copy(l.ISID[:], b[8:14])
	l.TargetSNs.unmarshal(b)
	if l.Transit && l.Continue {
		return ProtocolErrorf(OpLoginResp, "both T and C bits set")
	}
	if l.CSG == 2 || (l.Transit && l.NSG == 2) {
		return ProtocolErrorf(OpLoginResp, "reserved stage 2")
	}
	return nil
}

// TextRequest is the Text Request BHS (opcode 0x04).
type TextRequest struct {
	Immediate        bool
	Final, Continue  bool
	LUN              [8]byte
	ITT, TTT         uint32
	CmdSN, ExpStatSN uint32
}

// Marshal encodes the Text Request into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (t *TextRequest) Marshal(b *BHS) {
	b.reset(OpTextReq, t.Immediate)
	if t.Final {
		b[1] |= 0x80
	}
	if t.Continue {
		b[1] |= 0x40
	}
	b.setLUN(t.LUN)
	b.put32(16, t.ITT)
	b.put32(20, t.TTT)
	b.put32(24, t.CmdSN)
	b.put32(28, t.ExpStatSN)
}

// Unmarshal decodes a Text Request BHS. Another opcode is a *ProtocolError.
func (t *TextRequest) Unmarshal(b *BHS) error {
	if err := b.expect(OpTextReq); err != nil {
		return err
	}
	*t = TextRequest{Immediate: b.Immediate(), Final: b[1]&0x80 != 0, Continue: b[1]&0x40 != 0,
		LUN: b.lun(), ITT: b.ITT(), TTT: b.u32(20), CmdSN: b.u32(24), ExpStatSN: b.u32(28)}
	return nil
}

// TextResponse is the Text Response BHS (opcode 0x24).
type TextResponse struct {
	Final, Continue bool
	LUN             [8]byte
	ITT, TTT        uint32
	TargetSNs
}

// Marshal encodes the Text Response into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (t *TextResponse) Marshal(b *BHS) {
	b.reset(OpTextResp, false)
	if t.Final {
		b[1] |= 0x80
	}
	if t.Continue {
		b[1] |= 0x40
	}
	b.setLUN(t.LUN)
	b.put32(16, t.ITT)
	b.put32(20, t.TTT)
	t.TargetSNs.marshal(b)
}

// Unmarshal decodes a Text Response BHS. Another opcode is a *ProtocolError.
// So is a header with both F and C bits set.
func (t *TextResponse) Unmarshal(b *BHS) error {
	if err := b.expect(OpTextResp); err != nil {
		return err
	}
	*t = TextResponse{Final: b[1]&0x80 != 0, Continue: b[1]&0x40 != 0, LUN: b.lun(),
		ITT: b.ITT(), TTT: b.u32(20)}
	t.TargetSNs.unmarshal(b)
	if t.Final && t.Continue {
		return ProtocolErrorf(OpTextResp, "both F and C bits set")
	}
	return nil
}
