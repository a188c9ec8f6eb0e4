package isertest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
	"github.com/iser-attach/iser-attach/initiator/textkey"
	"github.com/iser-attach/iser-attach/rdma"
)

// region is registered memory in the fake address space.
type region struct {
	buf        []byte
	addr       uint64
	lkey, rkey uint32
}

func (r *region) Bytes() []byte { return r.buf }
func (r *region) Addr() uint64  { return r.addr }
func (r *region) LKey() uint32  { return r.lkey }
func (r *region) RKey() uint32  { return r.rkey }

// Conn is the fake RDMA connection. It implements initiator.RDMAConn.
type Conn struct {
	mu           sync.Mutex
	regions      []*region
	recvs        []rdma.RecvWR
	wcs          []rdma.Completion
	wake         chan struct{}
	disconnected bool
	closed       bool
	violations   []string
	rkeyUses     map[uint32]int
	skipRegs     int               // RegisterMemory calls to let through before failRegs
	failRegs     int               // RegisterMemory calls left to fail
	holdDrain    bool              // Poll waits after the flushed completions
	drainHeld    chan struct{}     // closed when a Poll waits under holdDrain
	holdSends    bool              // SEND completions are kept back (HoldSendCompletions)
	heldSends    []rdma.Completion // kept back, in order
	inSQ         int               // SENDs posted whose send queue entry is not retired
	maxInSQ      int
	sends        int // SENDs posted
	posts        int // PostSend calls
	recvPosts    int // PostRecv calls
	signaled     int // of which signaled

	target *Target
	work   chan func()
	done   chan struct{}
	// efd is readable while completions wait or the connection is
	// closed (PollFd, for a loop that reaps with TryPoll).
	efd int
}

// NewConn returns a fake connection to a fake target with a RAM disk of
// blocks 512-byte blocks.
func NewConn(blocks int) *Conn {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		panic(fmt.Sprintf("isertest: eventfd: %v", err))
	}
	c := &Conn{wake: make(chan struct{}, 1), work: make(chan func(), 4096), done: make(chan struct{}), efd: efd}
	c.target = &Target{c: c, disk: make([]byte, blocks*512)}
	go func() {
		defer close(c.done)
		for f := range c.work {
			f()
		}
	}()
	return c
}

// Target returns the fake target.
func (c *Conn) Target() *Target { return c.target }

// Violations lists what the initiator did that a real peer would refuse.
func (c *Conn) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

func (c *Conn) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// RKeyUses counts the target's RDMA accesses per rkey; regions get rkeys
// 0x9001, 0x9002, ... in the order they were registered.
func (c *Conn) RKeyUses() map[uint32]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[uint32]int{}
	for k, v := range c.rkeyUses {
		m[k] = v
	}
	return m
}

// RegisteredBytes is the memory the initiator has registered on this
// connection (what a real device pins), summed over every region.
func (c *Conn) RegisteredBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, r := range c.regions {
		n += int64(len(r.buf))
	}
	return n
}

// PeerPrivateData is what LIO answers: the 4-byte iSER CM header.
func (c *Conn) PeerPrivateData() []byte { return []byte{0, 0, 0, 0} }

// RemoteAddr implements initiator.RDMAConn.
func (c *Conn) RemoteAddr() string { return "fake-iser:3260" }

// ErrRegister is what RegisterMemory returns while FailRegistrations lasts:
// what ibv_reg_mr returns past RLIMIT_MEMLOCK.
var ErrRegister = errors.New("ibv_reg_mr: cannot allocate memory")

// FailRegistrations lets the next skip RegisterMemory calls through, then
// makes n fail with ErrRegister, as a device does once RLIMIT_MEMLOCK is
// reached.
func (c *Conn) FailRegistrations(skip, n int) {
	c.mu.Lock()
	c.skipRegs, c.failRegs = skip, n
	c.mu.Unlock()
}

// RegisterMemory implements initiator.RDMAConn.
func (c *Conn) RegisterMemory(size int) (initiator.RDMAMemory, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.skipRegs > 0 {
		c.skipRegs--
	} else if c.failRegs > 0 {
		c.failRegs--
		return nil, fmt.Errorf("register %d bytes: %w", size, ErrRegister)
	}
	n := uint32(len(c.regions) + 1)
	r := &region{buf: make([]byte, size), addr: uint64(n) << 40, lkey: 0x100 + n, rkey: 0x9000 + n}
	c.regions = append(c.regions, r)
	return r, nil
}

// RegisterBuffer implements initiator.RDMAConn: the region is b itself.
func (c *Conn) RegisterBuffer(b []byte) (initiator.RDMAMemory, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := uint32(len(c.regions) + 1)
	r := &region{buf: b, addr: uint64(n) << 40, lkey: 0x100 + n, rkey: 0x9000 + n}
	c.regions = append(c.regions, r)
	return r, nil
}

// find returns the bytes at [addr, addr+n) of the region with key.
func (c *Conn) find(addr uint64, n uint32, key uint32, remote bool) ([]byte, error) {
	for _, r := range c.regions {
		k := r.lkey
		if remote {
			k = r.rkey
		}
		if k != key {
			continue
		}
		if addr < r.addr || addr+uint64(n) > r.addr+uint64(len(r.buf)) {
			return nil, fmt.Errorf("access %#x+%d outside the region with key %#x", addr, n, key)
		}
		off := addr - r.addr
		return r.buf[off : off+uint64(n)], nil
	}
	return nil, fmt.Errorf("no region with key %#x", key)
}

func (c *Conn) complete(wc rdma.Completion) {
	c.wcs = append(c.wcs, wc)
	c.signal()
}

// signal wakes a Poll and makes PollFd readable.
func (c *Conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if c.efd >= 0 {
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(c.efd, one[:])
	}
}

// PollFd implements the initiator's reapable connection: readable while
// completions wait, or once closed.
func (c *Conn) PollFd() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.efd
}

// TryPoll is Poll without waiting: 0 when nothing waits.
func (c *Conn) TryPoll(out []rdma.Completion) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, rdma.ErrClosed
	}
	var buf [8]byte
	_, _ = unix.Read(c.efd, buf[:])
	if len(c.wcs) > 0 {
		n := copy(out, c.wcs)
		c.wcs = c.wcs[n:]
		if len(c.wcs) > 0 {
			c.signal() // level-triggered, as a CQ's channel with events left
		}
		return n, nil
	}
	if c.disconnected && !c.holdDrain {
		return 0, rdma.ErrDisconnected
	}
	return 0, nil
}

// PostRecv implements initiator.RDMAConn.
func (c *Conn) PostRecv(wrs []rdma.RecvWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.disconnected || c.closed {
		return rdma.ErrClosed
	}
	for _, wr := range wrs {
		if _, err := c.find(wr.SGE.Addr, wr.SGE.Length, wr.SGE.LKey, false); err != nil {
			c.violate("post recv: %v", err)
			return err
		}
		c.recvs = append(c.recvs, wr)
	}
	c.recvPosts++
	return nil
}

// PostSend implements initiator.RDMAConn: SENDs go to the target.
func (c *Conn) PostSend(wrs []rdma.SendWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.disconnected || c.closed {
		return rdma.ErrClosed
	}
	c.posts++
	for _, wr := range wrs {
		if wr.Op != rdma.OpSend {
			c.violate("initiator posted opcode %v", wr.Op)
			continue
		}
		var msg []byte
		for _, s := range wr.SGEs {
			b, err := c.find(s.Addr, s.Length, s.LKey, false)
			if err != nil {
				c.violate("post send: %v", err)
				return err
			}
			msg = append(msg, b...)
		}
		// As a device does: an unsignaled SEND has no completion; its
		// send queue entry is retired by the next signaled one's.
		c.inSQ++
		c.maxInSQ = max(c.maxInSQ, c.inSQ)
		c.sends++
		if wr.Signaled {
			c.signaled++
		}
		switch {
		case !wr.Signaled:
		case c.holdSends:
			c.heldSends = append(c.heldSends, rdma.Completion{ID: wr.ID, Op: rdma.OpSend})
		default:
			c.complete(rdma.Completion{ID: wr.ID, Op: rdma.OpSend})
			c.inSQ = 0
		}
		c.work <- func() { c.target.handle(msg) }
	}
	return nil
}

// deliver SENDs msg to the initiator into its oldest posted receive.
func (c *Conn) deliver(msg []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.disconnected || c.closed {
		return
	}
	if len(c.recvs) == 0 {
		c.violate("RNR: target SEND with no receive posted")
		return
	}
	wr := c.recvs[0]
	c.recvs = c.recvs[1:]
	if uint32(len(msg)) > wr.SGE.Length {
		c.violate("receive buffer of %d bytes for a %d-byte SEND", wr.SGE.Length, len(msg))
		return
	}
	b, _ := c.find(wr.SGE.Addr, uint32(len(msg)), wr.SGE.LKey, false)
	copy(b, msg)
	c.complete(rdma.Completion{ID: wr.ID, Op: rdma.OpRecv, ByteLen: uint32(len(msg))})
}

// rdmaAccess is the target's RDMA READ or WRITE of initiator memory.
func (c *Conn) rdmaAccess(rkey uint32, va uint64, n int) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.disconnected || c.closed {
		// The initiator's queue pair is in the error state: the target's
		// RDMA operations fail.
		return nil, rdma.ErrDisconnected
	}
	b, err := c.find(va, uint32(n), rkey, true)
	if err != nil {
		c.violate("target RDMA: %v", err)
	}
	if c.rkeyUses == nil {
		c.rkeyUses = map[uint32]int{}
	}
	c.rkeyUses[rkey]++
	return b, err
}

// Poll implements initiator.RDMAConn.
func (c *Conn) Poll(ctx context.Context, out []rdma.Completion) (int, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, rdma.ErrClosed
		}
		if len(c.wcs) > 0 {
			n := copy(out, c.wcs)
			c.wcs = c.wcs[n:]
			c.mu.Unlock()
			return n, nil
		}
		if c.disconnected && !c.holdDrain {
			c.mu.Unlock()
			return 0, rdma.ErrDisconnected
		}
		if c.disconnected && c.drainHeld != nil {
			close(c.drainHeld)
			c.drainHeld = nil
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// HoldSendCompletions keeps the completions of the initiator's SENDs back
// while the target still receives and answers them, as an HCA does whose
// acknowledgements lag behind the target's responses: every SEND stays
// in the send queue until ReleaseSendCompletions.
func (c *Conn) HoldSendCompletions() {
	c.mu.Lock()
	c.holdSends = true
	c.mu.Unlock()
}

// Sends is how many SENDs the initiator posted, and how many of them
// asked for a completion.
func (c *Conn) Sends() (posted, signaled int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sends, c.signaled
}

// Posts is how many times the initiator posted to the send queue (each
// a doorbell on a real device).
func (c *Conn) Posts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts
}

// RecvPosts is how many times the initiator posted to the receive queue,
// and how many receives are posted now.
func (c *Conn) RecvPosts() (calls, posted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recvPosts, len(c.recvs)
}

// SendQueueUse is how many send queue entries the initiator's SENDs
// occupy now (posted, not retired by a signaled completion delivered), and
// at most so far.
func (c *Conn) SendQueueUse() (now, most int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inSQ, c.maxInSQ
}

// ReleaseSendCompletions completes the SENDs held back, in order, and
// stops holding.
func (c *Conn) ReleaseSendCompletions() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdSends = false
	for _, wc := range c.heldSends {
		c.complete(wc)
	}
	if len(c.heldSends) > 0 {
		c.inSQ = 0 // the last one retires every entry before it
	}
	c.heldSends = nil
}

// HoldDrain makes the connection slow to report its end, as a real one
// whose disconnect event is still to come: once disconnected, Poll
// returns the flushed completions and then waits (until Close or its
// context ends) instead of failing. The returned channel is closed when a
// Poll waits so, the initiator having taken every flushed completion.
func (c *Conn) HoldDrain() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdDrain = true
	c.drainHeld = make(chan struct{})
	return c.drainHeld
}

// Disconnect flushes the posted receives.
func (c *Conn) Disconnect() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.disconnected {
		return nil
	}
	c.disconnected = true
	for _, wr := range c.recvs {
		c.complete(rdma.Completion{ID: wr.ID, Op: rdma.OpRecv, Status: rdma.WCWRFlushErr})
	}
	c.recvs = nil
	c.complete(rdma.Completion{}) // wake a poller
	c.wcs = c.wcs[:len(c.wcs)-1]
	return nil
}

// Close implements initiator.RDMAConn.
func (c *Conn) Close() error {
	c.Disconnect()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.work)
	c.signal()
	c.mu.Unlock()
	<-c.done
	c.mu.Lock()
	_ = unix.Close(c.efd)
	c.efd = -1
	c.mu.Unlock()
	return nil
}

// Target is the fake iSER target behind a Conn.
type Target struct {
	c      *Conn
	mu     sync.Mutex
	disk   []byte
	statSN uint32
	expCmd uint32
	// Commands counts SCSI commands served; Immediate counts the bytes that
	// came as immediate data.
	Commands, Immediate int
	trickle             time.Duration
	swallow             int
	// rejects is how many of the next SCSI commands are answered with a
	// Reject PDU instead of being executed.
	rejects      int
	rejectReason uint8
	// recovered is how many of the next reads end in CHECK CONDITION with
	// RECOVERED ERROR, no data placed and no residual.
	recovered int
	// recoveredWrites is how many of the next writes, executed, end in
	// CHECK CONDITION with RECOVERED ERROR.
	recoveredWrites int
}

// RecoveredWrites makes the target execute the next n WRITEs and answer
// them with CHECK CONDITION and a current RECOVERED ERROR.
func (t *Target) RecoveredWrites(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recoveredWrites = n
}

// recoveredSense is a SCSI Response data segment: a current RECOVERED
// ERROR (recovered data with retries).
func recoveredSense() []byte {
	sense := scsi.Sense{ResponseCode: scsi.SenseFixedCurrent, Key: scsi.KeyRecoveredError, ASC: 0x17, ASCQ: 0x01}
	b := sense.Marshal()
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
}

// RecoveredReads makes the target answer the next n READs with CHECK
// CONDITION and a current RECOVERED ERROR without placing their data and
// without a residual (a target that under-reports what it moved). Over
// iSER the initiator cannot count the bytes placed to notice.
func (t *Target) RecoveredReads(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recovered = n
}

// Swallow makes the target drop the next n SCSI commands without a
// response or any data transfer (it still answers NOP-Outs and completes
// task management requests).
func (t *Target) Swallow(n int) {
	t.mu.Lock()
	t.swallow = n
	t.mu.Unlock()
}

// Swallowing is how many of the commands Swallow named are still to come.
func (t *Target) Swallowing() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.swallow
}

// SetTrickle makes the target a slow one: it RDMA-WRITEs read data in 4 KiB
// pieces, one every d, and answers nothing else meanwhile (NOP-Outs wait),
// sending the SCSI Response after the last piece. Once the initiator's
// queue pair is in error the transfer stops and no response is sent.
func (t *Target) SetTrickle(d time.Duration) {
	t.mu.Lock()
	t.trickle = d
	t.mu.Unlock()
}

// RejectCommands makes the target answer the next n SCSI commands with a
// Reject PDU (reason, e.g. 0x05 command not supported) carrying the
// command's header, without executing them or touching their buffers.
func (t *Target) RejectCommands(n int, reason uint8) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rejects, t.rejectReason = n, reason
}

// Disk returns the RAM disk.
func (t *Target) Disk() []byte { return t.disk }

func (t *Target) reply(h interface{ Marshal(*pdu.BHS) }, data []byte) {
	var b pdu.BHS
	h.Marshal(&b)
	b.SetDataSegmentLength(len(data))
	msg := make([]byte, pdu.ISERHeaderLen, pdu.ISERHeaderLen+48+len(data))
	(&pdu.ISERHeader{Flags: pdu.ISERFlagControl}).Marshal(msg)
	msg = append(append(msg, b[:]...), data...)
	t.c.deliver(msg)
}

func (t *Target) sns() pdu.TargetSNs {
	s := pdu.TargetSNs{StatSN: t.statSN, ExpCmdSN: t.expCmd, MaxCmdSN: t.expCmd + 63}
	t.statSN++
	return s
}

var errBad = errors.New("bad request")

func (t *Target) handle(msg []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var h pdu.ISERHeader
	if len(msg) < 76 || h.Unmarshal(msg) != nil {
		t.c.mu.Lock()
		t.c.violate("malformed SEND of %d bytes", len(msg))
		t.c.mu.Unlock()
		return
	}
	var b pdu.BHS
	copy(b[:], msg[28:76])
	data := msg[76:]
	if len(data) != b.DataSegmentLength() {
		t.c.mu.Lock()
		t.c.violate("%s: %d data bytes, header says %d", b.Opcode(), len(data), b.DataSegmentLength())
		t.c.mu.Unlock()
		return
	}
	if !b.Immediate() {
		t.expCmd = binary.BigEndian.Uint32(b[24:28]) + 1
	}
	switch b.Opcode() {
	case pdu.OpLoginReq:
		t.login(&b, data)
	case pdu.OpSCSICommand:
		if t.rejects > 0 {
			t.rejects--
			t.reply(&pdu.Reject{Reason: t.rejectReason, TargetSNs: t.sns()}, b[:])
			return
		}
		t.scsi(&h, &b, data)
	case pdu.OpNOPOut:
		var n pdu.NOPOut
		_ = n.Unmarshal(&b)
		if n.ITT != 0xffffffff {
			t.reply(&pdu.NOPIn{ITT: n.ITT, TTT: 0xffffffff, TargetSNs: t.sns()}, nil)
		}
	case pdu.OpLogoutReq:
		t.reply(&pdu.LogoutResponse{ITT: b.ITT(), TargetSNs: t.sns()}, nil)
	case pdu.OpTaskMgmtReq:
		t.reply(&pdu.TaskMgmtResponse{ITT: b.ITT(), TargetSNs: t.sns()}, nil)
	default:
		t.c.mu.Lock()
		t.c.violate("initiator sent %s over iSER", b.Opcode())
		t.c.mu.Unlock()
	}
}

func (t *Target) login(b *pdu.BHS, data []byte) {
	var lr pdu.LoginRequest
	_ = lr.Unmarshal(b)
	if t.expCmd == 0 {
		t.expCmd = lr.CmdSN
	}
	kvs, _ := textkey.Parse(data)
	var out []textkey.KV
	for _, kv := range kvs {
		switch kv.Key {
		case "InitiatorName", "SessionType", "TargetName":
		case "AuthMethod":
			out = append(out, textkey.KV{Key: "AuthMethod", Value: "None"})
		case "HeaderDigest", "DataDigest", "MaxRecvDataSegmentLength":
			t.c.mu.Lock()
			t.c.violate("%s offered over iSER", kv.Key)
			t.c.mu.Unlock()
		default:
			v := kv.Value
			for i := range v {
				if v[i] == ',' {
					v = v[:i]
					break
				}
			}
			out = append(out, textkey.KV{Key: kv.Key, Value: v})
		}
	}
	t.reply(&pdu.LoginResponse{Transit: lr.Transit, CSG: lr.CSG, NSG: lr.NSG, ISID: lr.ISID,
		TSIH: 7, ITT: lr.ITT, TargetSNs: t.sns()}, textkey.Encode(out))
}

func (t *Target) scsi(h *pdu.ISERHeader, b *pdu.BHS, imm []byte) {
	var cmd pdu.SCSICommand
	_ = cmd.Unmarshal(b)
	if t.swallow > 0 {
		t.swallow--
		return
	}
	t.Commands++
	t.Immediate += len(imm)
	resp := pdu.SCSIResponse{ITT: cmd.ITT}
	n := int(cmd.ExpectedDataTransferLength)
	if t.probeCommand(h, &cmd, n) {
		return
	}
	lba, blocks, write, ok := decodeRW(cmd.CDB[:])
	off := int(lba) * 512
	if ok && !write && t.recovered > 0 {
		t.recovered--
		resp.Status = 2
		resp.TargetSNs = t.sns()
		t.reply(&resp, recoveredSense())
		return
	}
	if !ok || blocks*512 != n || off+n > len(t.disk) {
		resp.Status = 2
		resp.TargetSNs = t.sns()
		sense := []byte{0, 18, 0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0}
		t.reply(&resp, sense)
		return
	}
	if write {
		if h.Flags&pdu.ISERFlagRSV != 0 || len(imm) > n {
			t.c.mu.Lock()
			t.c.violate("write with read STag or too much immediate data")
			t.c.mu.Unlock()
		}
		copy(t.disk[off:], imm)
		if rest := n - len(imm); rest > 0 {
			if h.Flags&pdu.ISERFlagWSV == 0 {
				t.c.mu.Lock()
				t.c.violate("write of %d bytes beyond immediate data without a write STag", rest)
				t.c.mu.Unlock()
				return
			}
			src, err := t.c.rdmaAccess(h.WriteSTag, h.WriteVA, rest)
			if err != nil {
				return
			}
			copy(t.disk[off+len(imm):], src)
		}
	} else {
		if h.Flags&pdu.ISERFlagRSV == 0 {
			t.c.mu.Lock()
			t.c.violate("read without a read STag")
			t.c.mu.Unlock()
			return
		}
		if t.trickle > 0 {
			if !t.trickleRead(h, t.disk[off:off+n]) {
				return
			}
		} else {
			dst, err := t.c.rdmaAccess(h.ReadSTag, h.ReadVA, n)
			if err != nil {
				return
			}
			copy(dst, t.disk[off:off+n])
		}
	}
	var sense []byte
	if write && t.recoveredWrites > 0 {
		t.recoveredWrites--
		resp.Status, sense = 2, recoveredSense()
	}
	resp.TargetSNs = t.sns()
	t.reply(&resp, sense)
}

// probeCommand answers what a LUN sends when it opens: TEST UNIT READY,
// a standard INQUIRY and READ CAPACITY(16); false for other commands.
func (t *Target) probeCommand(h *pdu.ISERHeader, cmd *pdu.SCSICommand, n int) bool {
	var data []byte
	switch {
	case cmd.CDB[0] == 0x00:
	case cmd.CDB[0] == 0x12 && cmd.CDB[1]&0x01 == 0:
		inq := scsi.InquiryData{Version: 6, ResponseDataFormat: 2, CmdQue: true,
			Vendor: "FAKE", Product: "ISER DISK", Revision: "1"}
		data = inq.Marshal()
	case cmd.CDB[0] == 0x9e:
		rc := scsi.Capacity16{LastLBA: uint64(len(t.disk)/512 - 1), BlockLength: 512}
		data = rc.Marshal()
	default:
		return false
	}
	resp := pdu.SCSIResponse{ITT: cmd.ITT}
	if len(data) > 0 {
		if h.Flags&pdu.ISERFlagRSV == 0 || n == 0 {
			t.c.mu.Lock()
			t.c.violate("%#x without a read STag", cmd.CDB[0])
			t.c.mu.Unlock()
			return true
		}
		m := min(n, len(data))
		dst, err := t.c.rdmaAccess(h.ReadSTag, h.ReadVA, m)
		if err != nil {
			return true
		}
		copy(dst, data[:m])
		if m < n {
			resp.Underflow, resp.ResidualCount = true, uint32(n-m)
		}
	}
	resp.TargetSNs = t.sns()
	t.reply(&resp, nil)
	return true
}

func decodeRW(cdb []byte) (lba uint64, blocks int, write, ok bool) {
	switch cdb[0] {
	case 0x28, 0x2a:
		return uint64(binary.BigEndian.Uint32(cdb[2:])), int(binary.BigEndian.Uint16(cdb[7:])), cdb[0] == 0x2a, true
	case 0x88, 0x8a:
		return binary.BigEndian.Uint64(cdb[2:]), int(binary.BigEndian.Uint32(cdb[10:])), cdb[0] == 0x8a, true
	}
	return 0, 0, false, false
}

// trickleRead RDMA-WRITEs src piece by piece (SetTrickle); false when the
// connection refused a piece.
func (t *Target) trickleRead(h *pdu.ISERHeader, src []byte) bool {
	for o := 0; o < len(src); o += 4096 {
		time.Sleep(t.trickle)
		l := min(4096, len(src)-o)
		dst, err := t.c.rdmaAccess(h.ReadSTag, h.ReadVA+uint64(o), l)
		if err != nil {
			return false
		}
		copy(dst, src[o:o+l])
	}
	return true
}
