package iscsitest

import (
	"encoding/binary"
	"sync"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// LU is a minimal SCSI block device behind a Handler, enough for OpenLUN
// and for tests of the caching mode page: TEST UNIT READY, INQUIRY
// (standard data and VPD page 0), READ CAPACITY(10/16), MODE SENSE(6/10)
// with the caching page, SYNCHRONIZE CACHE, and READ and WRITE(10/16)
// (reads return zeros, writes are only recorded). It can raise UNIT
// ATTENTION 2A/01 (MODE PARAMETERS CHANGED) when its cache mode changes, and
// 2A/09 (CAPACITY DATA HAS CHANGED) when it is resized.
type LU struct {
	mu        sync.Mutex
	blocks    uint64
	wce, fua  bool
	ua        bool
	capUA     bool
	ops       []byte // SCSI opcodes served, with FUA writes as OpFUAWrite
	modeSense int
	limits    []byte // VPD page 0xB0 answered though page 0x00 does not list it
}

// OpFUAWrite marks a WRITE with the FUA bit in LU.Ops.
const OpFUAWrite = 0xff

// NewLU returns a LU of blocks 512-byte blocks; wce is the caching page's
// WCE bit and fua the DPOFUA bit of the mode parameter header.
func NewLU(blocks uint64, wce, fua bool) *LU {
	return &LU{blocks: blocks, wce: wce, fua: fua}
}

// SetBlockLimits makes INQUIRY answer VPD page 0xB0 with bl while page
// 0x00 still lists no page but itself: LIO does so for a LU without a unit
// serial number.
func (l *LU) SetBlockLimits(bl scsi.BlockLimits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limits = bl.Marshal()
}

// SetWriteCache changes the WCE bit; with unitAttention the next command
// gets CHECK CONDITION, UNIT ATTENTION, MODE PARAMETERS CHANGED.
func (l *LU) SetWriteCache(wce, unitAttention bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wce = wce
	l.ua = l.ua || unitAttention
}

// SetBlocks resizes the LU to blocks 512-byte blocks; with unitAttention
// the next command gets CHECK CONDITION, UNIT ATTENTION, CAPACITY DATA HAS
// CHANGED.
func (l *LU) SetBlocks(blocks uint64, unitAttention bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blocks = blocks
	l.capUA = l.capUA || unitAttention
}

// Ops returns the opcodes of the SCSI commands served so far, in order
// (WRITEs with FUA as OpFUAWrite).
func (l *LU) Ops() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.ops...)
}

// ModeSenses counts the MODE SENSE commands served.
func (l *LU) ModeSenses() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.modeSense
}

// Handle answers req: SCSI Commands as the LU, everything else as Good.
func (l *LU) Handle(t *Target, req *pdu.PDU) []Reply {
	if req.BHS.Opcode() != pdu.OpSCSICommand {
		return t.Good(req)
	}
	t.Ack(req)
	var c pdu.SCSICommand
	_ = c.Unmarshal(&req.BHS)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ua {
		l.ua = false
		return l.check(t, &c, 0x06, 0x2a, 0x01)
	}
	if l.capUA {
		l.capUA = false
		return l.check(t, &c, 0x06, 0x2a, 0x09)
	}
	op := c.CDB[0]
	var data []byte
	switch op {
	case 0x00: // TEST UNIT READY
	case 0x12: // INQUIRY
		if c.CDB[1]&1 != 0 {
			switch {
			case c.CDB[2] == 0xb0 && l.limits != nil:
				data = l.limits
			case c.CDB[2] != 0:
				return l.check(t, &c, 0x05, 0x24, 0x00)
			default:
				data = []byte{0, 0, 0, 1, 0}
			}
		} else {
			data = make([]byte, 36)
			data[2], data[3], data[4] = 6, 2, 31
			copy(data[8:], "FAKE    ")
			copy(data[16:], "iscsitest LU    ")
			copy(data[32:], "0001")
		}
	case 0x25: // READ CAPACITY(10)
		data = make([]byte, 8)
		binary.BigEndian.PutUint32(data, uint32(l.blocks-1))
		binary.BigEndian.PutUint32(data[4:], 512)
	case 0x9e: // READ CAPACITY(16)
		data = make([]byte, 32)
		binary.BigEndian.PutUint64(data, l.blocks-1)
		binary.BigEndian.PutUint32(data[8:], 512)
	case 0x1a, 0x5a: // MODE SENSE(6), (10)
		l.modeSense++
		data = l.modeData(op == 0x5a)
	case 0x35, 0x91: // SYNCHRONIZE CACHE(10), (16)
	case 0x28, 0x88: // READ
		data = make([]byte, c.ExpectedDataTransferLength)
	case 0x2a, 0x8a: // WRITE
		if c.CDB[1]&0x08 != 0 {
			op = OpFUAWrite
		}
	default:
		return l.check(t, &c, 0x05, 0x20, 0x00)
	}
	l.ops = append(l.ops, op)
	return goodStatus(t, &c, data)
}

// modeData is the mode parameter header and the caching page.
func (l *LU) modeData(ten bool) []byte {
	page := make([]byte, 20)
	page[0], page[1] = 0x08, 18
	if l.wce {
		page[2] |= 0x04
	}
	var dev byte
	if l.fua {
		dev = 0x10
	}
	if ten {
		h := make([]byte, 8)
		binary.BigEndian.PutUint16(h, uint16(len(h)+len(page)-2))
		h[3] = dev
		return append(h, page...)
	}
	return append([]byte{byte(4 + len(page) - 1), 0, dev, 0}, page...)
}

// check answers CHECK CONDITION with fixed-format sense.
func (l *LU) check(t *Target, c *pdu.SCSICommand, key, asc, ascq byte) []Reply {
	sense := make([]byte, 20)
	binary.BigEndian.PutUint16(sense, 18)
	s := sense[2:]
	s[0], s[2], s[7], s[12], s[13] = 0x70, key, 10, asc, ascq
	r := pdu.SCSIResponse{ITT: c.ITT, Status: 2, TargetSNs: t.SNs(true)}
	return []Reply{{PDU: pdu.NewPDU(&r, sense)}}
}

// goodStatus answers c with GOOD: a SCSI Response for a command that reads
// nothing, else data (cut to the expected length, or short with its
// residual) in one Data-In carrying the status.
func goodStatus(t *Target, c *pdu.SCSICommand, data []byte) []Reply {
	if !c.Read {
		r := pdu.SCSIResponse{ITT: c.ITT, TargetSNs: t.SNs(true)}
		return []Reply{{PDU: pdu.NewPDU(&r, nil)}}
	}
	d := pdu.DataIn{Final: true, HasStatus: true, ITT: c.ITT, TTT: 0xffffffff, TargetSNs: t.SNs(true)}
	if want := int(c.ExpectedDataTransferLength); len(data) > want {
		data = data[:want]
	} else if len(data) < want {
		d.Underflow, d.ResidualCount = true, uint32(want-len(data))
	}
	return []Reply{{PDU: pdu.NewPDU(&d, data)}}
}
