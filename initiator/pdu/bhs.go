package pdu

import (
	"encoding/binary"
	"fmt"
)

// BHSLen is the size of the Basic Header Segment (RFC 7143 section 11.2.1).
const BHSLen = 48

// BHS is a raw Basic Header Segment. The typed PDU headers (SCSICommand,
// LoginResponse, ...) marshal into and unmarshal from it.
type BHS [BHSLen]byte

// Opcode is an iSCSI PDU opcode (RFC 7143 section 11.2.1.2).
type Opcode uint8

// Initiator and target opcodes.
const (
	OpNOPOut       Opcode = 0x00
	OpSCSICommand  Opcode = 0x01
	OpTaskMgmtReq  Opcode = 0x02
	OpLoginReq     Opcode = 0x03
	OpTextReq      Opcode = 0x04
	OpDataOut      Opcode = 0x05
	OpLogoutReq    Opcode = 0x06
	OpSNACKReq     Opcode = 0x10
	OpNOPIn        Opcode = 0x20
	OpSCSIResponse Opcode = 0x21
	OpTaskMgmtResp Opcode = 0x22
	OpLoginResp    Opcode = 0x23
	OpTextResp     Opcode = 0x24
	OpDataIn       Opcode = 0x25
	OpLogoutResp   Opcode = 0x26
	OpR2T          Opcode = 0x31
	OpAsyncMessage Opcode = 0x32
	OpReject       Opcode = 0x3f
	opcodeMask            = 0x3f
	flagImmediate         = 0x40
	flagFinal             = 0x80
)

// ReservedTag is the reserved tag value 0xffffffff: an ITT or TTT that
// names no task or transfer (RFC 7143).
const ReservedTag uint32 = 0xffffffff

// MaxDataSegmentLength is the largest data segment the 24-bit
// DataSegmentLength field of the BHS can describe.
const MaxDataSegmentLength = 1<<24 - 1

var opcodeNames = map[Opcode]string{
	OpNOPOut: "NOP-Out", OpSCSICommand: "SCSI Command", OpTaskMgmtReq: "Task Management Request",
	OpLoginReq: "Login Request", OpTextReq: "Text Request", OpDataOut: "SCSI Data-Out",
	OpLogoutReq: "Logout Request", OpSNACKReq: "SNACK Request", OpNOPIn: "NOP-In",
	OpSCSIResponse: "SCSI Response", OpTaskMgmtResp: "Task Management Response",
	OpLoginResp: "Login Response", OpTextResp: "Text Response", OpDataIn: "SCSI Data-In",
	OpLogoutResp: "Logout Response", OpR2T: "R2T", OpAsyncMessage: "Async Message",
	OpReject: "Reject",
}

// String returns the opcode's RFC 7143 name, or its hex value if unknown.
func (o Opcode) String() string {
	if n, ok := opcodeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("opcode 0x%02x", uint8(o))
}

// Known reports whether o is an opcode defined by RFC 7143.
func (o Opcode) Known() bool { _, ok := opcodeNames[o]; return ok }

// FromTarget reports whether o is sent by targets (bit 5 set).
func (o Opcode) FromTarget() bool { return o&0x20 != 0 }

// Opcode returns the PDU's opcode.
func (b *BHS) Opcode() Opcode { return Opcode(b[0] & opcodeMask) }

// Immediate reports the I bit.
func (b *BHS) Immediate() bool { return b[0]&flagImmediate != 0 }

// Final reports the F bit (T bit for Login).
func (b *BHS) Final() bool { return b[1]&flagFinal != 0 }

// TotalAHSLength is the total AHS length in bytes.
func (b *BHS) TotalAHSLength() int { return int(b[4]) * 4 }

// DataSegmentLength is the data segment length in bytes, without padding.
func (b *BHS) DataSegmentLength() int {
	return int(b[5])<<16 | int(b[6])<<8 | int(b[7])
}

// ITT returns the Initiator Task Tag.
func (b *BHS) ITT() uint32 { return binary.BigEndian.Uint32(b[16:20]) }

func (b *BHS) setOpcode(op Opcode, immediate bool) {
	b[0] = byte(op)
	if immediate {
		b[0] |= flagImmediate
	}
}

// SetDataSegmentLength sets bytes 5-7.
func (b *BHS) SetDataSegmentLength(n int) {
	b[5], b[6], b[7] = byte(n>>16), byte(n>>8), byte(n)
}

// SetTotalAHSLength sets byte 4 from a length in bytes (a multiple of 4).
func (b *BHS) SetTotalAHSLength(n int) { b[4] = byte(n / 4) }

func (b *BHS) u32(off int) uint32        { return binary.BigEndian.Uint32(b[off : off+4]) }
func (b *BHS) u16(off int) uint16        { return binary.BigEndian.Uint16(b[off : off+2]) }
func (b *BHS) u64(off int) uint64        { return binary.BigEndian.Uint64(b[off : off+8]) }
func (b *BHS) put32(off int, v uint32)   { binary.BigEndian.PutUint32(b[off:off+4], v) }
func (b *BHS) put16(off int, v uint16)   { binary.BigEndian.PutUint16(b[off:off+2], v) }
func (b *BHS) put64(off int, v uint64)   { binary.BigEndian.PutUint64(b[off:off+8], v) }
func (b *BHS) lun() [8]byte              { var l [8]byte; copy(l[:], b[8:16]); return l }
func (b *BHS) setLUN(l [8]byte)          { copy(b[8:16], l[:]) }
func (b *BHS) reset(op Opcode, imm bool) { *b = BHS{}; b.setOpcode(op, imm) }

// ProtocolError reports a PDU that breaks RFC 7143 or RFC 7145. The
// connection that carried it cannot be trusted any more.
type ProtocolError struct {
	Op     Opcode
	Reason string
}

// Error names the opcode and the rule the PDU broke.
func (e *ProtocolError) Error() string {
	return fmt.Sprintf("iscsi protocol error in %s: %s", e.Op, e.Reason)
}

// ProtocolErrorf returns a *ProtocolError for opcode op, its reason
// formatted as by fmt.Sprintf.
func ProtocolErrorf(op Opcode, format string, args ...any) error {
	return &ProtocolError{Op: op, Reason: fmt.Sprintf(format, args...)}
}

func (b *BHS) expect(op Opcode) error {
	if got := b.Opcode(); got != op {
		return ProtocolErrorf(got, "expected %s", op)
	}
	return nil
}
