package pdu

// SCSI command and data PDUs: SCSI Command, SCSI Response, Data-In,
// Data-Out and R2T (RFC 7143 sections 11.3 to 11.8).

// TargetSNs are the sequence numbers every status-bearing target PDU carries
// at bytes 24 to 35.
type TargetSNs struct {
	StatSN, ExpCmdSN, MaxCmdSN uint32
}

func (s *TargetSNs) unmarshal(b *BHS) {
	s.StatSN, s.ExpCmdSN, s.MaxCmdSN = b.u32(24), b.u32(28), b.u32(32)
}

// TargetSNs returns the StatSN, ExpCmdSN and MaxCmdSN at bytes 24 to 35 of
// a status-bearing target PDU, whatever its opcode.
func (b *BHS) TargetSNs() TargetSNs {
	var s TargetSNs
	s.unmarshal(b)
	return s
}

func (s *TargetSNs) marshal(b *BHS) {
	b.put32(24, s.StatSN)
	b.put32(28, s.ExpCmdSN)
	b.put32(32, s.MaxCmdSN)
}

// Task attributes (byte 1, bits 0-2 of a SCSI Command).
const (
	AttrUntagged = 0
	AttrSimple   = 1
	AttrOrdered  = 2
	AttrHead     = 3
	AttrACA      = 4
)

// SCSICommand is the SCSI Command BHS (opcode 0x01).
type SCSICommand struct {
	Immediate                  bool
	Final, Read, Write         bool
	Attr                       uint8
	LUN                        [8]byte
	ITT                        uint32
	ExpectedDataTransferLength uint32
	CmdSN, ExpStatSN           uint32
	// CDB holds the first 16 bytes of the CDB; longer CDBs continue in an
	// extended-CDB AHS.
	CDB [16]byte
}

// Marshal encodes the SCSI Command into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (c *SCSICommand) Marshal(b *BHS) {
	b.reset(OpSCSICommand, c.Immediate)
	b[1] = c.Attr & 7
	if c.Final {
		b[1] |= 0x80
	}
	if c.Read {
		b[1] |= 0x40
	}
	if c.Write {
		b[1] |= 0x20
	}
	b.setLUN(c.LUN)
	b.put32(16, c.ITT)
	b.put32(20, c.ExpectedDataTransferLength)
	b.put32(24, c.CmdSN)
	b.put32(28, c.ExpStatSN)
	copy(b[32:48], c.CDB[:])
}

// Unmarshal decodes a SCSI Command BHS. Another opcode is a *ProtocolError.
func (c *SCSICommand) Unmarshal(b *BHS) error {
	if err := b.expect(OpSCSICommand); err != nil {
		return err
	}
	*c = SCSICommand{
		Immediate: b.Immediate(), Final: b[1]&0x80 != 0, Read: b[1]&0x40 != 0,
		Write: b[1]&0x20 != 0, Attr: b[1] & 7, LUN: b.lun(), ITT: b.ITT(),
		ExpectedDataTransferLength: b.u32(20), CmdSN: b.u32(24), ExpStatSN: b.u32(28),
	}
	copy(c.CDB[:], b[32:48])
	return nil
}

// SCSI Response codes (byte 2).
const (
	RespCommandCompleted = 0x00
	RespTargetFailure    = 0x01
)

// SCSIResponse is the SCSI Response BHS (opcode 0x21).
type SCSIResponse struct {
	BidiOverflow, BidiUnderflow bool // o, u
	Overflow, Underflow         bool // O, U
	Response                    uint8
	Status                      uint8
	ITT                         uint32
	SNACKTag                    uint32
	TargetSNs
	ExpDataSN             uint32
	BidiReadResidualCount uint32
	ResidualCount         uint32
}

// Marshal encodes the SCSI Response into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (r *SCSIResponse) Marshal(b *BHS) {
	b.reset(OpSCSIResponse, false)
	b[1] = 0x80
	if r.BidiOverflow {
		b[1] |= 0x10
	}
	if r.BidiUnderflow {
		b[1] |= 0x08
	}
	if r.Overflow {
		b[1] |= 0x04
	}
	if r.Underflow {
		b[1] |= 0x02
	}
	b[2], b[3] = r.Response, r.Status
	b.put32(16, r.ITT)
	b.put32(20, r.SNACKTag)
	r.TargetSNs.marshal(b)
	b.put32(36, r.ExpDataSN)
	b.put32(40, r.BidiReadResidualCount)
	b.put32(44, r.ResidualCount)
}

// Unmarshal decodes a SCSI Response BHS. Another opcode is a *ProtocolError.
// So is a header with a missing F bit or both O and U (or o and u) bits set.
func (r *SCSIResponse) Unmarshal(b *BHS) error {
	if err := b.expect(OpSCSIResponse); err != nil {
		return err
	}
	if !b.Final() {
		return ProtocolErrorf(OpSCSIResponse, "F bit not set")
	}
	f := b[1]
	*r = SCSIResponse{
		BidiOverflow: f&0x10 != 0, BidiUnderflow: f&0x08 != 0,
		Overflow: f&0x04 != 0, Underflow: f&0x02 != 0,
		Response: b[2], Status: b[3], ITT: b.ITT(), SNACKTag: b.u32(20),
		ExpDataSN: b.u32(36), BidiReadResidualCount: b.u32(40), ResidualCount: b.u32(44),
	}
	r.TargetSNs.unmarshal(b)
	if r.Overflow && r.Underflow {
		return ProtocolErrorf(OpSCSIResponse, "both O and U bits set")
	}
	if r.BidiOverflow && r.BidiUnderflow {
		return ProtocolErrorf(OpSCSIResponse, "both o and u bits set")
	}
	return nil
}

// DataIn is the SCSI Data-In BHS (opcode 0x25).
type DataIn struct {
	Final, Acknowledge  bool
	Overflow, Underflow bool
	HasStatus           bool // S bit: Status and the SNs are valid
	Status              uint8
	LUN                 [8]byte
	ITT, TTT            uint32
	TargetSNs
	DataSN, BufferOffset uint32
	ResidualCount        uint32
}

// Marshal encodes the SCSI Data-In into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (d *DataIn) Marshal(b *BHS) {
	b.reset(OpDataIn, false)
	if d.Final {
		b[1] |= 0x80
	}
	if d.Acknowledge {
		b[1] |= 0x40
	}
	if d.Overflow {
		b[1] |= 0x04
	}
	if d.Underflow {
		b[1] |= 0x02
	}
	if d.HasStatus {
		b[1] |= 0x01
		b[3] = d.Status
	}
	b.setLUN(d.LUN)
	b.put32(16, d.ITT)
	b.put32(20, d.TTT)
	d.TargetSNs.marshal(b)
	b.put32(36, d.DataSN)
	b.put32(40, d.BufferOffset)
	b.put32(44, d.ResidualCount)
}

// Unmarshal decodes a SCSI Data-In BHS. Another opcode is a *ProtocolError.
// So is a header with the S bit without the F bit or both O and U bits set.
func (d *DataIn) Unmarshal(b *BHS) error {
	if err := b.expect(OpDataIn); err != nil {
		return err
	}
	f := b[1]
	*d = DataIn{
		Final: f&0x80 != 0, Acknowledge: f&0x40 != 0, Overflow: f&0x04 != 0,
		Underflow: f&0x02 != 0, HasStatus: f&0x01 != 0, LUN: b.lun(),
		ITT: b.ITT(), TTT: b.u32(20), DataSN: b.u32(36), BufferOffset: b.u32(40),
		ResidualCount: b.u32(44),
	}
	if d.HasStatus {
		d.Status = b[3] // reserved without the S bit
	}
	d.TargetSNs.unmarshal(b)
	if d.HasStatus && !d.Final {
		return ProtocolErrorf(OpDataIn, "S bit set without F bit")
	}
	if d.Overflow && d.Underflow {
		return ProtocolErrorf(OpDataIn, "both O and U bits set")
	}
	return nil
}

// DataOut is the SCSI Data-Out BHS (opcode 0x05).
type DataOut struct {
	Final        bool
	LUN          [8]byte
	ITT, TTT     uint32
	ExpStatSN    uint32
	DataSN       uint32
	BufferOffset uint32
}

// Marshal encodes the SCSI Data-Out into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (d *DataOut) Marshal(b *BHS) {
	b.reset(OpDataOut, false)
	if d.Final {
		b[1] = 0x80
	}
	b.setLUN(d.LUN)
	b.put32(16, d.ITT)
	b.put32(20, d.TTT)
	b.put32(28, d.ExpStatSN)
	b.put32(36, d.DataSN)
	b.put32(40, d.BufferOffset)
}

// Unmarshal decodes a SCSI Data-Out BHS. Another opcode is a *ProtocolError.
func (d *DataOut) Unmarshal(b *BHS) error {
	if err := b.expect(OpDataOut); err != nil {
		return err
	}
	*d = DataOut{Final: b.Final(), LUN: b.lun(), ITT: b.ITT(), TTT: b.u32(20),
		ExpStatSN: b.u32(28), DataSN: b.u32(36), BufferOffset: b.u32(40)}
	return nil
}

// R2T is the Ready To Transfer BHS (opcode 0x31).
type R2T struct {
	LUN      [8]byte
	ITT, TTT uint32
	TargetSNs
	R2TSN                     uint32
	BufferOffset              uint32
	DesiredDataTransferLength uint32
}

// Marshal encodes the R2T into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (r *R2T) Marshal(b *BHS) {
	b.reset(OpR2T, false)
	b[1] = 0x80
	b.setLUN(r.LUN)
	b.put32(16, r.ITT)
	b.put32(20, r.TTT)
	r.TargetSNs.marshal(b)
	b.put32(36, r.R2TSN)
	b.put32(40, r.BufferOffset)
	b.put32(44, r.DesiredDataTransferLength)
}

// Unmarshal decodes an R2T BHS. Another opcode is a *ProtocolError. So is a
// header with the reserved TTT 0xffffffff or a zero desired length.
func (r *R2T) Unmarshal(b *BHS) error {
	if err := b.expect(OpR2T); err != nil {
		return err
	}
	*r = R2T{LUN: b.lun(), ITT: b.ITT(), TTT: b.u32(20), R2TSN: b.u32(36),
		BufferOffset: b.u32(40), DesiredDataTransferLength: b.u32(44)}
	r.TargetSNs.unmarshal(b)
	if r.TTT == ReservedTag {
		return ProtocolErrorf(OpR2T, "reserved target transfer tag 0xffffffff")
	}
	if r.DesiredDataTransferLength == 0 {
		return ProtocolErrorf(OpR2T, "desired data transfer length 0")
	}
	return nil
}
