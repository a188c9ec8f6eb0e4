package pdu

// Control PDUs: NOP-Out/NOP-In, Task Management, Logout, Reject, Async
// Message and SNACK (RFC 7143 sections 11.5, 11.6, 11.14 to 11.19).

// NOPOut is the NOP-Out BHS (opcode 0x00).
type NOPOut struct {
	Immediate        bool
	LUN              [8]byte
	ITT, TTT         uint32
	CmdSN, ExpStatSN uint32
}

// Marshal encodes the NOP-Out into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (n *NOPOut) Marshal(b *BHS) {
	b.reset(OpNOPOut, n.Immediate)
	b[1] = 0x80
	b.setLUN(n.LUN)
	b.put32(16, n.ITT)
	b.put32(20, n.TTT)
	b.put32(24, n.CmdSN)
	b.put32(28, n.ExpStatSN)
}

// Unmarshal decodes a NOP-Out BHS. Another opcode is a *ProtocolError.
func (n *NOPOut) Unmarshal(b *BHS) error {
	if err := b.expect(OpNOPOut); err != nil {
		return err
	}
	*n = NOPOut{Immediate: b.Immediate(), LUN: b.lun(), ITT: b.ITT(), TTT: b.u32(20),
		CmdSN: b.u32(24), ExpStatSN: b.u32(28)}
	return nil
}

// NOPIn is the NOP-In BHS (opcode 0x20).
type NOPIn struct {
	LUN      [8]byte
	ITT, TTT uint32
	TargetSNs
}

// Marshal encodes the NOP-In into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (n *NOPIn) Marshal(b *BHS) {
	b.reset(OpNOPIn, false)
	b[1] = 0x80
	b.setLUN(n.LUN)
	b.put32(16, n.ITT)
	b.put32(20, n.TTT)
	n.TargetSNs.marshal(b)
}

// Unmarshal decodes a NOP-In BHS. Another opcode is a *ProtocolError.
func (n *NOPIn) Unmarshal(b *BHS) error {
	if err := b.expect(OpNOPIn); err != nil {
		return err
	}
	*n = NOPIn{LUN: b.lun(), ITT: b.ITT(), TTT: b.u32(20)}
	n.TargetSNs.unmarshal(b)
	// RFC 7143 section 11.19.1 forbids ITT and TTT both 0xffffffff, but
	// tgt's iSER driver sends such NOP-Ins; the session ignores them.
	return nil
}

// Task management functions (RFC 7143 section 11.5.1).
const (
	TMFAbortTask        = 1
	TMFAbortTaskSet     = 2
	TMFClearACA         = 3
	TMFClearTaskSet     = 4
	TMFLogicalUnitReset = 5
	TMFTargetWarmReset  = 6
	TMFTargetColdReset  = 7
	TMFTaskReassign     = 8
)

// TaskMgmtRequest is the Task Management Function Request BHS (opcode 0x02).
type TaskMgmtRequest struct {
	Immediate        bool
	Function         uint8
	LUN              [8]byte
	ITT, RTT         uint32
	CmdSN, ExpStatSN uint32
	RefCmdSN         uint32
	ExpDataSN        uint32
}

// Marshal encodes the Task Management Function Request into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (t *TaskMgmtRequest) Marshal(b *BHS) {
	b.reset(OpTaskMgmtReq, t.Immediate)
	b[1] = 0x80 | t.Function&0x7f
	b.setLUN(t.LUN)
	b.put32(16, t.ITT)
	b.put32(20, t.RTT)
	b.put32(24, t.CmdSN)
	b.put32(28, t.ExpStatSN)
	b.put32(32, t.RefCmdSN)
	b.put32(36, t.ExpDataSN)
}

// Unmarshal decodes a Task Management Function Request BHS. Another opcode is
// a *ProtocolError.
func (t *TaskMgmtRequest) Unmarshal(b *BHS) error {
	if err := b.expect(OpTaskMgmtReq); err != nil {
		return err
	}
	*t = TaskMgmtRequest{Immediate: b.Immediate(), Function: b[1] & 0x7f, LUN: b.lun(),
		ITT: b.ITT(), RTT: b.u32(20), CmdSN: b.u32(24), ExpStatSN: b.u32(28),
		RefCmdSN: b.u32(32), ExpDataSN: b.u32(36)}
	return nil
}

// Task management responses (RFC 7143 section 11.6.1).
var tmfResponseNames = map[uint8]string{
	0: "function complete", 1: "task does not exist", 2: "LUN does not exist",
	3: "task still allegiant", 4: "task allegiance reassignment not supported",
	5: "task management function not supported", 6: "function authorization failed",
	255: "function rejected",
}

// TMFResponseName returns the RFC 7143 name of a Task Management Function
// Response code, and whether the code is one RFC 7143 defines.
func TMFResponseName(r uint8) (string, bool) {
	name, ok := tmfResponseNames[r]
	return name, ok
}

// TaskMgmtResponse is the Task Management Function Response BHS (opcode 0x22).
type TaskMgmtResponse struct {
	Response uint8
	ITT      uint32
	TargetSNs
}

// Marshal encodes the Task Management Function Response into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (t *TaskMgmtResponse) Marshal(b *BHS) {
	b.reset(OpTaskMgmtResp, false)
	b[1] = 0x80
	b[2] = t.Response
	b.put32(16, t.ITT)
	t.TargetSNs.marshal(b)
}

// Unmarshal decodes a Task Management Function Response BHS. Another opcode
// is a *ProtocolError.
func (t *TaskMgmtResponse) Unmarshal(b *BHS) error {
	if err := b.expect(OpTaskMgmtResp); err != nil {
		return err
	}
	*t = TaskMgmtResponse{Response: b[2], ITT: b.ITT()}
	t.TargetSNs.unmarshal(b)
	return nil
}

// Logout reason codes.
const (
	LogoutCloseSession    = 0
	LogoutCloseConnection = 1
	LogoutRemoveRecovery  = 2
)

// LogoutRequest is the Logout Request BHS (opcode 0x06).
type LogoutRequest struct {
	Immediate        bool
	Reason           uint8
	ITT              uint32
	CID              uint16
	CmdSN, ExpStatSN uint32
}

// Marshal encodes the Logout Request into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (l *LogoutRequest) Marshal(b *BHS) {
	b.reset(OpLogoutReq, l.Immediate)
	b[1] = 0x80 | l.Reason&0x7f
	b.put32(16, l.ITT)
	b.put16(20, l.CID)
	b.put32(24, l.CmdSN)
	b.put32(28, l.ExpStatSN)
}

// Unmarshal decodes a Logout Request BHS. Another opcode is a *ProtocolError.
func (l *LogoutRequest) Unmarshal(b *BHS) error {
	if err := b.expect(OpLogoutReq); err != nil {
		return err
	}
	*l = LogoutRequest{Immediate: b.Immediate(), Reason: b[1] & 0x7f, ITT: b.ITT(),
		CID: b.u16(20), CmdSN: b.u32(24), ExpStatSN: b.u32(28)}
	return nil
}

// LogoutResponse is the Logout Response BHS (opcode 0x26).
type LogoutResponse struct {
	Response uint8
	ITT      uint32
	TargetSNs
	Time2Wait, Time2Retain uint16
}

// Marshal encodes the Logout Response into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (l *LogoutResponse) Marshal(b *BHS) {
	b.reset(OpLogoutResp, false)
	b[1] = 0x80
	b[2] = l.Response
	b.put32(16, l.ITT)
	l.TargetSNs.marshal(b)
	b.put16(40, l.Time2Wait)
	b.put16(42, l.Time2Retain)
}

// Unmarshal decodes a Logout Response BHS. Another opcode is a *ProtocolError.
func (l *LogoutResponse) Unmarshal(b *BHS) error {
	if err := b.expect(OpLogoutResp); err != nil {
		return err
	}
	*l = LogoutResponse{Response: b[2], ITT: b.ITT(), Time2Wait: b.u16(40), Time2Retain: b.u16(42)}
	l.TargetSNs.unmarshal(b)
	return nil
}

// Reject reasons (RFC 7143 section 11.17.1).
var rejectReasonNames = map[uint8]string{
	0x02: "data (payload) digest error", 0x03: "SNACK reject", 0x04: "protocol error",
	0x05: "command not supported", 0x06: "immediate command reject: too many immediate commands",
	0x07: "task in progress", 0x08: "invalid data ack", 0x09: "invalid PDU field",
	0x0a: "long operation reject: out of resources", 0x0b: "deprecated", 0x0c: "waiting for logout",
}

// RejectReasonName returns the RFC 7143 name of a Reject reason code, and
// whether the code is one RFC 7143 defines.
func RejectReasonName(r uint8) (string, bool) {
	name, ok := rejectReasonNames[r]
	return name, ok
}

// Reject is the Reject BHS (opcode 0x3f). Its data segment holds the
// rejected PDU's header.
type Reject struct {
	Reason uint8
	TargetSNs
	DataSN uint32
}

// Marshal encodes the Reject into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (r *Reject) Marshal(b *BHS) {
	b.reset(OpReject, false)
	b[1] = 0x80
	b[2] = r.Reason
	b.put32(16, ReservedTag)
	r.TargetSNs.marshal(b)
	b.put32(36, r.DataSN)
}

// Unmarshal decodes a Reject BHS. Another opcode is a *ProtocolError.
func (r *Reject) Unmarshal(b *BHS) error {
	if err := b.expect(OpReject); err != nil {
		return err
	}
	*r = Reject{Reason: b[2], DataSN: b.u32(36)}
	r.TargetSNs.unmarshal(b)
	return nil
}

// Async events (RFC 7143 section 11.9.1).
const (
	AsyncSCSIEvent          = 0
	AsyncLogoutRequest      = 1
	AsyncDropConnection     = 2
	AsyncDropAllConnections = 3
	AsyncRenegotiate        = 4
	AsyncVendor             = 255
)

// AsyncMessage is the Asynchronous Message BHS (opcode 0x32).
type AsyncMessage struct {
	LUN [8]byte
	TargetSNs
	AsyncEvent, AsyncVCode             uint8
	Parameter1, Parameter2, Parameter3 uint16
}

// Marshal encodes the Asynchronous Message into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (a *AsyncMessage) Marshal(b *BHS) {
	b.reset(OpAsyncMessage, false)
	b[1] = 0x80
	b.setLUN(a.LUN)
	b.put32(16, ReservedTag)
	a.TargetSNs.marshal(b)
	b[36], b[37] = a.AsyncEvent, a.AsyncVCode
	b.put16(38, a.Parameter1)
	b.put16(40, a.Parameter2)
	b.put16(42, a.Parameter3)
}

// Unmarshal decodes a Asynchronous Message BHS. Another opcode is a
// *ProtocolError.
func (a *AsyncMessage) Unmarshal(b *BHS) error {
	if err := b.expect(OpAsyncMessage); err != nil {
		return err
	}
	*a = AsyncMessage{LUN: b.lun(), AsyncEvent: b[36], AsyncVCode: b[37],
		Parameter1: b.u16(38), Parameter2: b.u16(40), Parameter3: b.u16(42)}
	a.TargetSNs.unmarshal(b)
	return nil
}

// SNACKRequest is the SNACK Request BHS (opcode 0x10). With
// ErrorRecoveryLevel=0 the initiator never sends one; the codec exists for
// completeness and for the fake target in tests.
type SNACKRequest struct {
	Type              uint8
	LUN               [8]byte
	ITT, TTT          uint32
	ExpStatSN         uint32
	BegRun, RunLength uint32
}

// Marshal encodes the SNACK Request into b, overwriting all of it (the data
// segment length is left 0 for NewPDU or the caller to set).
func (s *SNACKRequest) Marshal(b *BHS) {
	b.reset(OpSNACKReq, false)
	b[1] = 0x80 | s.Type&0x0f
	b.setLUN(s.LUN)
	b.put32(16, s.ITT)
	b.put32(20, s.TTT)
	b.put32(28, s.ExpStatSN)
	b.put32(40, s.BegRun)
	b.put32(44, s.RunLength)
}

// Unmarshal decodes a SNACK Request BHS. Another opcode is a *ProtocolError.
func (s *SNACKRequest) Unmarshal(b *BHS) error {
	if err := b.expect(OpSNACKReq); err != nil {
		return err
	}
	*s = SNACKRequest{Type: b[1] & 0x0f, LUN: b.lun(), ITT: b.ITT(), TTT: b.u32(20),
		ExpStatSN: b.u32(28), BegRun: b.u32(40), RunLength: b.u32(44)}
	return nil
}
