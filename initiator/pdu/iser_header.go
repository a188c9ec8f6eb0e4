package pdu

import (
	"encoding/binary"
	"fmt"
)

// The iSER header (RFC 7145 section 9.2, as Linux's struct iser_ctrl) that
// precedes the BHS in every RDMA SEND.

// ISERHeaderLen is the size of the iSER header.
const ISERHeaderLen = 28

// iSER header flags.
const (
	ISERFlagHello      = 0x20
	ISERFlagHelloReply = 0x30
	ISERFlagControl    = 0x10 // iSCSI control-type PDU
	ISERFlagWSV        = 0x08 // write STag valid
	ISERFlagRSV        = 0x04 // read STag valid
	iserOpMask         = 0xf0
)

// ISERHeader is the iSER header of a control-type PDU.
type ISERHeader struct {
	Flags     uint8
	WriteSTag uint32
	WriteVA   uint64
	ReadSTag  uint32
	ReadVA    uint64
}

// Marshal writes the header into b (at least ISERHeaderLen bytes).
func (h *ISERHeader) Marshal(b []byte) {
	_ = b[ISERHeaderLen-1]
	b[0], b[1], b[2], b[3] = h.Flags, 0, 0, 0
	binary.BigEndian.PutUint32(b[4:], h.WriteSTag)
	binary.BigEndian.PutUint64(b[8:], h.WriteVA)
	binary.BigEndian.PutUint32(b[16:], h.ReadSTag)
	binary.BigEndian.PutUint64(b[20:], h.ReadVA)
}

// Unmarshal decodes an iSER header. Only iSCSI control-type PDUs are
// accepted: Linux targets never send Hello (RFC 7145 section 5.1.3).
func (h *ISERHeader) Unmarshal(b []byte) error {
	if len(b) < ISERHeaderLen {
		return fmt.Errorf("iser header: %d bytes, need %d", len(b), ISERHeaderLen)
	}
	*h = ISERHeader{
		Flags:     b[0],
		WriteSTag: binary.BigEndian.Uint32(b[4:]),
		WriteVA:   binary.BigEndian.Uint64(b[8:]),
		ReadSTag:  binary.BigEndian.Uint32(b[16:]),
		ReadVA:    binary.BigEndian.Uint64(b[20:]),
	}
	switch h.Flags & iserOpMask {
	case ISERFlagControl:
		return nil
	case ISERFlagHello, ISERFlagHelloReply:
		return fmt.Errorf("iser header: unexpected Hello/HelloReply (flags 0x%02x)", h.Flags)
	}
	return fmt.Errorf("iser header: unknown opcode (flags 0x%02x)", h.Flags)
}

// iSER CM private data (RFC 7145 section 9.1, Linux struct iser_cm_hdr).
const (
	iserCMZBVANotSupported = 0x80 // zero-based virtual addresses not supported
	iserCMSendWInvNotSupp  = 0x40 // send with invalidate not supported
	iserCMPrivateDataLen   = 4
)

// ISERPrivateData is the 4-byte iSER CM REQ private data this initiator
// sends: no zero-based addressing, no remote invalidation (it uses one
// long-lived memory region whose key the target must not invalidate).
func ISERPrivateData() []byte {
	return []byte{iserCMZBVANotSupported | iserCMSendWInvNotSupp, 0, 0, 0}
}
