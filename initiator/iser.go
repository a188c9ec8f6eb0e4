package initiator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
	"github.com/iser-attach/iser-attach/rdma"
)

// RDMAConn is the connected RDMA endpoint the iSER datamover runs on. Package
// rdma's *Conn implements it (through rdmaConn); tests use a fake.
type RDMAConn interface {
	PeerPrivateData() []byte
	RegisterMemory(size int) (RDMAMemory, error)
	// RegisterBuffer registers page-aligned memory the caller owns; closing
	// the connection deregisters it without unmapping it.
	RegisterBuffer(b []byte) (RDMAMemory, error)
	PostSend(wrs []rdma.SendWR) error
	PostRecv(wrs []rdma.RecvWR) error
	// Poll blocks until at least one completion, ctx ends, the connection
	// is disconnected and drained, or it is closed.
	Poll(ctx context.Context, out []rdma.Completion) (int, error)
	Disconnect() error
	// Close drains and releases the connection and its memory regions.
	Close() error
	RemoteAddr() string
}

// RDMAMemory is registered memory: the device may read and write it.
type RDMAMemory interface {
	Bytes() []byte
	Addr() uint64
	LKey() uint32
	RKey() uint32
}

// iSER sizes (RFC 7145; what LIO isert and tgt accept).
const (
	iserHeadersLen = pdu.ISERHeaderLen + pdu.BHSLen
	// iserRecvDataLen is the InitiatorRecvDataSegmentLength we declare.
	iserRecvDataLen = 8192
	iserRecvBufLen  = iserHeadersLen + iserRecvDataLen + 4 // + optional padding
	// A send slot holds the iSER header, BHS, AHS room and a control PDU's
	// data segment (login, text, NOP ping data).
	iserSendAHSRoom = 52
	iserSendSlotLen = iserHeadersLen + iserSendAHSRoom + 8192
	// iserMaxImmediate caps immediate data: LIO takes at most 8192 bytes
	// of data in the SEND of a command.
	iserMaxImmediate = 8192
	// iserControlSlots are send slots beyond the queue depth, for NOP-Out,
	// task management, text and logout.
	iserControlSlots = 16
	// iserSpareData are bounce slots beyond the queue depth: a slot whose
	// task was aborted without an answer stays out of use until teardown.
	iserSpareData = 8
	iserPollBatch = 32
	// iserRepostBatch: consumed receives are posted again this many at a
	// time (and at the end of every batch of completions). The receive
	// ring has this many beyond the queue depth and the control slots
	// (iserRecvRing), for the receives held back, so batching never
	// takes one from a response the target may send.
	iserRepostBatch = 8
	// iserSignalEvery: one SEND in this many asks for a completion (and
	// the one that takes the last free send slot).
	iserSignalEvery = 16
)

// work request ids: kind in the top byte, slot index below.
const (
	wrRecv = 1 << 56
	wrSend = 2 << 56
	wrMask = 0xff << 56
)

// ISERDatamover is the iSER datamover (RFC 7145) over one RDMA RC
// connection, as Linux targets (LIO isert, tgt) expect it.
//
// Memory: the control region, registered once, holds the receive ring and
// the send slots. A command's buffer is advertised with its region's rkey
// (the target RDMA-WRITEs read data into it and RDMA-READs write data from
// it). Buffers in memory given to RegisterIOBuffers (a Nexus's I/O buffers)
// go without a copy; other buffers are bounced through a 512 KiB slot of
// the bounce pool, registered on demand (see iser_bounce.go), so a
// frontend with registered buffers does not pin a second set.
//
// Goroutines: a poller, started by NewISERDatamover, owns the completion
// queue: it frees send slots, turns receives into PDUs for Recv and
// reposts the receive buffers. Close disconnects, lets the poller drain
// every outstanding work request, and only then releases the memory.
type ISERDatamover struct {
	conn  RDMAConn
	ctrl  RDMAMemory
	nRecv int
	nSend int
	slot  int // bounce slot size

	mu       rankedMutex[datamoverRank] // after the session's (lockorder.go)
	freeSend []int
	// inSQ holds the send slots whose SENDs are in the send queue, in the
	// order they were queued (a ring from sqHead): a signaled completion
	// frees its slot and every one before it. sinceSignal counts the
	// unsignaled SENDs queued since the last signaled one.
	inSQ        []int
	sqHead      int
	sqLen       int
	sinceSignal int
	freeData    []int        // free bounce slots
	bounce      []RDMAMemory // bounce chunks; slot i is in chunk i/iserBounceChunk
	nBounce     int          // bounce slots registered so far
	maxBounce   int          // cap: queue depth + spare
	extra       []RDMAMemory // caller memory from RegisterIOBuffers
	pinned      int64        // bytes registered on this connection
	posted      []bool
	ents        []iserTask           // per task index (the ITT's low bits)
	extraEnts   map[uint32]*iserTask // tasks whose index is beyond ents
	sges        [][2]rdma.SGE        // per send slot: its SEND's gather list
	reposts     []rdma.RecvWR        // receives to post again (under reapMu)
	rx          pdu.PDU              // the PDU handed to the inline handler
	pending     []rdma.SendWR        // queued by SendCommand, posted by Kick
	spareWRs    []rdma.SendWR        // pending's other buffer, while Kick posts
	overflow    []deferredSend       // waiting for a send slot, in CmdSN order
	posting     bool                 // a Kick is posting
	plugs       int                  // Plugs not yet Unplugged: Kick holds back
	params      Params
	ffp         bool
	closed      bool
	err         error

	memMu   sync.RWMutex // held (R) while copying from a bounce slot
	memGone bool

	// reaper is the loop that holds the CQ (iser_reap.go), nil while the
	// poller does; pollCancel ends the poller's current Poll.
	reaper     *iserReaper
	pollCancel context.CancelFunc
	reapConn   reapableConn          // conn, when it can be reaped by a loop
	reapMu     rankedMutex[reapRank] // held while the CQ is polled and its completions run: first of all (lockorder.go)
	unpark     chan struct{}         // a parked poller resumes (Release)

	pdus      chan *pdu.PDU
	inline    atomic.Pointer[func(*pdu.PDU) error] // ReceiveInline's handler
	stop      chan struct{}
	pollerOut chan struct{}
	stopOnce  sync.Once
	closeOnce sync.Once
}

// deferredSend is a SEND that found every send slot in use (their SENDs not
// yet completed): it goes out, in order, as completions free slots, so
// that no sender ever waits for the poller, which may itself be the sender
// (ReceiveInline).
type deferredSend struct {
	cmd pdu.SCSICommand
	t   *Task
	st  *iserTask
	p   *pdu.PDU // a control PDU instead of a command
}

type iserTask struct {
	t         *Task
	itt       uint32
	live      bool // SendCommand took it; TaskDone ends it
	slot      int  // bounce slot, or -1 when the caller's buffer is registered
	mem       RDMAMemory
	base      int // offset of the buffer in mem
	responded bool
	rejected  bool // the target Rejected the command: it never started
	sent      bool // SendCommand took it: a reservation is used once
	queued    bool // its SEND was queued: the target may access the buffer
}

// iserRecvRing is the receive ring for queueDepth commands: a receive for
// the response of every command and control request in flight, plus the
// receives a batch of completions holds back before it posts them again.
// Unsolicited PDUs (NOP-In pings, Async Messages, Rejects) use the margin.
func iserRecvRing(queueDepth int) int {
	return queueDepth + iserControlSlots + iserRepostBatch
}

// NewISERDatamover runs iSER over an established RDMA connection, for up to
// queueDepth commands in flight. On error conn is closed.
func NewISERDatamover(conn RDMAConn, queueDepth int) (*ISERDatamover, error) {
	if queueDepth <= 0 {
		queueDepth = 128
	}
	d := &ISERDatamover{
		conn:      conn,
		nRecv:     iserRecvRing(queueDepth),
		nSend:     queueDepth + iserControlSlots,
		slot:      MaxTransfer,
		maxBounce: queueDepth + iserSpareData,
		ents:      make([]iserTask, queueDepth+iserControlSlots),
		reposts:   make([]rdma.RecvWR, 0, iserRepostBatch),
		// Every queued SEND holds a send slot: the lists never grow.
		pending:  make([]rdma.SendWR, 0, queueDepth+iserControlSlots),
		spareWRs: make([]rdma.SendWR, 0, queueDepth+iserControlSlots),
		sges:     make([][2]rdma.SGE, queueDepth+iserControlSlots),
		inSQ:     make([]int, queueDepth+iserControlSlots),
		pdus:     make(chan *pdu.PDU, queueDepth+iserControlSlots),
		stop:     make(chan struct{}), pollerOut: make(chan struct{}),
		unpark: make(chan struct{}, 1),
		params: DefaultParams(),
	}
	d.reapConn, _ = conn.(reapableConn)
	var err error
	if d.ctrl, err = conn.RegisterMemory(d.nRecv*iserRecvBufLen + d.nSend*iserSendSlotLen); err != nil {
		conn.Close()
		return nil, fmt.Errorf("iser: register control buffers: %w", err)
	}
	d.pinned = int64(len(d.ctrl.Bytes()))
	// The first chunk of the bounce pool now, so that too little locked
	// memory is a connect error rather than a failing command.
	if err := d.growBounceLocked(); err != nil {
		conn.Close()
		return nil, err
	}
	d.posted = make([]bool, d.nRecv)
	for i := d.nSend - 1; i >= 0; i-- {
		d.freeSend = append(d.freeSend, i)
	}
	go d.poller()
	return d, nil
}

// Transport implements Datamover.
func (d *ISERDatamover) Transport() string { return TransportISER }

// RemoteAddr implements Datamover.
func (d *ISERDatamover) RemoteAddr() string { return d.conn.RemoteAddr() }

// OperationalKeys implements Datamover: the iSER keys Linux targets
// negotiate; no digests and no MaxRecvDataSegmentLength (RFC 7145 section 6).
func (d *ISERDatamover) OperationalKeys(n *textkey.Negotiation, want Params) {
	_ = n.Offer("RDMAExtensions", "Yes")
	_ = n.Offer("InitiatorRecvDataSegmentLength", fmt.Sprint(iserRecvDataLen))
	_ = n.Offer("TargetRecvDataSegmentLength", fmt.Sprint(iserRecvDataLen))
}

// AllocateConnectionResources implements Datamover: post the whole receive
// ring before the final Login Request.
func (d *ISERDatamover) AllocateConnectionResources(Params) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var wrs []rdma.RecvWR
	for i := range d.posted {
		if !d.posted[i] {
			d.posted[i] = true
			wrs = append(wrs, d.recvWR(i))
		}
	}
	if len(wrs) == 0 {
		return nil
	}
	if err := d.conn.PostRecv(wrs); err != nil {
		return fmt.Errorf("iser: post receive ring: %w", err)
	}
	return nil
}

// NoticeKeyValues implements Datamover.
func (d *ISERDatamover) NoticeKeyValues(p Params) error {
	if !p.RDMAExtensions {
		return errors.New("iser: the target did not accept RDMAExtensions=Yes")
	}
	if p.HeaderDigest || p.DataDigest {
		return errors.New("iser: digests negotiated on an iSER connection")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.params, d.ffp = p, true
	return nil
}

func (d *ISERDatamover) recvWR(i int) rdma.RecvWR {
	return rdma.RecvWR{ID: wrRecv | uint64(i), SGE: rdma.SGE{
		Addr: d.ctrl.Addr() + uint64(i*iserRecvBufLen), Length: iserRecvBufLen, LKey: d.ctrl.LKey()}}
}

func (d *ISERDatamover) sendSlot(i int) (buf []byte, addr uint64) {
	off := d.nRecv*iserRecvBufLen + i*iserSendSlotLen
	return d.ctrl.Bytes()[off : off+iserSendSlotLen], d.ctrl.Addr() + uint64(off)
}

// entryLocked returns the per-task state for t, made afresh.
func (d *ISERDatamover) entryLocked(t *Task) *iserTask {
	var st *iserTask
	if i := ittIndex(t.ITT); i < len(d.ents) {
		st = &d.ents[i]
	} else {
		st = new(iserTask) // a session deeper than this datamover
		if d.extraEnts == nil {
			d.extraEnts = make(map[uint32]*iserTask)
		}
		d.extraEnts[t.ITT] = st
	}
	*st = iserTask{t: t, itt: t.ITT, slot: -1}
	return st
}

// reservedLocked returns t's entry, reserved by PrepareCommand or taken by
// SendCommand for t's current ITT, or nil. The entries are the
// datamover's: a Task carries none of its state.
func (d *ISERDatamover) reservedLocked(t *Task) *iserTask {
	var st *iserTask
	if i := ittIndex(t.ITT); i < len(d.ents) {
		st = &d.ents[i]
	} else {
		st = d.extraEnts[t.ITT]
	}
	if st == nil || st.t != t || st.itt != t.ITT {
		return nil
	}
	return st
}

// liveLocked returns the state of the command with itt that SendCommand
// took and TaskDone has not ended, or nil.
func (d *ISERDatamover) liveLocked(itt uint32) *iserTask {
	if i := ittIndex(itt); i < len(d.ents) {
		if st := &d.ents[i]; st.live && st.itt == itt {
			return st
		}
		return nil
	}
	if st := d.extraEnts[itt]; st != nil && st.live {
		return st
	}
	return nil
}

// setLiveLocked marks st taken by SendCommand, or ended.
func (d *ISERDatamover) setLiveLocked(st *iserTask, live bool) {
	st.live = live
	if ittIndex(st.itt) < len(d.ents) {
		return
	}
	if !live {
		delete(d.extraEnts, st.itt)
		return
	}
	if d.extraEnts == nil {
		d.extraEnts = make(map[uint32]*iserTask)
	}
	d.extraEnts[st.itt] = st
}

// takeSendLocked takes a free send slot; the caller checked there is one.
func (d *ISERDatamover) takeSendLocked() int {
	i := d.freeSend[len(d.freeSend)-1]
	d.freeSend = d.freeSend[:len(d.freeSend)-1]
	return i
}

// mustDeferLocked reports whether a SEND has to wait for a slot: none is
// free, or earlier SENDs already wait (they keep their order).
func (d *ISERDatamover) mustDeferLocked() bool {
	return len(d.freeSend) == 0 || len(d.overflow) > 0
}

// sendDeferredLocked queues the deferred SENDs that free slots allow and
// reports whether it queued any (the caller kicks).
func (d *ISERDatamover) sendDeferredLocked() bool {
	queued := false
	for len(d.overflow) > 0 && len(d.freeSend) > 0 && !d.closed {
		ds := d.overflow[0]
		d.overflow[0] = deferredSend{}
		d.overflow = d.overflow[1:]
		if ds.p != nil {
			d.sendControlLocked(d.takeSendLocked(), ds.p)
		} else if d.liveLocked(ds.cmd.ITT) == ds.st {
			d.sendCommandLocked(d.takeSendLocked(), &ds.cmd, ds.t, ds.st)
		} // else the task ended before it was sent
		queued = true
	}
	if len(d.overflow) == 0 {
		d.overflow = nil
	}
	return queued
}

func (d *ISERDatamover) closedErr() error {
	if d.err != nil {
		return d.err
	}
	return fmt.Errorf("iser: %w", net_ErrClosed)
}

// net_ErrClosed mirrors net.ErrClosed without importing net here.
var net_ErrClosed = errors.New("use of closed network connection")

// SendPDU implements Datamover. During login it posts one receive before
// each Login Request (CHAP takes several rounds).
func (d *ISERDatamover) SendPDU(p *pdu.PDU) error {
	if len(p.Data) > iserSendSlotLen-iserHeadersLen-iserSendAHSRoom {
		return fmt.Errorf("iser send %s: data segment of %d bytes", p.BHS.Opcode(), len(p.Data))
	}
	if len(p.AHS) > iserSendAHSRoom {
		return fmt.Errorf("iser send %s: AHS of %d bytes", p.BHS.Opcode(), len(p.AHS))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ffp && p.BHS.Opcode() == pdu.OpLoginReq {
		if err := d.postOneRecvLocked(); err != nil {
			return err
		}
	}
	if d.closed {
		return d.closedErr()
	}
	if d.mustDeferLocked() {
		q := &pdu.PDU{BHS: p.BHS, AHS: append([]byte(nil), p.AHS...), Data: append([]byte(nil), p.Data...)}
		d.overflow = append(d.overflow, deferredSend{p: q})
		return nil
	}
	d.sendControlLocked(d.takeSendLocked(), p)
	d.mu.Unlock()
	err := d.Kick()
	d.mu.Lock() // for the deferred Unlock
	return err
}

// sendControlLocked queues control PDU p's SEND from send slot i.
func (d *ISERDatamover) sendControlLocked(i int, p *pdu.PDU) {
	buf, addr := d.sendSlot(i)
	(&pdu.ISERHeader{Flags: pdu.ISERFlagControl}).Marshal(buf)
	p.BHS.SetTotalAHSLength(len(p.AHS))
	p.BHS.SetDataSegmentLength(len(p.Data))
	n := copy(buf[pdu.ISERHeaderLen:], p.BHS[:])
	n += copy(buf[pdu.ISERHeaderLen+n:], p.AHS)
	n += copy(buf[pdu.ISERHeaderLen+n:], p.Data)
	sges := d.sges[i][:1]
	sges[0] = rdma.SGE{Addr: addr, Length: uint32(pdu.ISERHeaderLen + n), LKey: d.ctrl.LKey()}
	d.queueSendLocked(i, sges)
}

func (d *ISERDatamover) postOneRecvLocked() error {
	for i := range d.posted {
		if !d.posted[i] {
			d.posted[i] = true
			if err := d.conn.PostRecv([]rdma.RecvWR{d.recvWR(i)}); err != nil {
				return fmt.Errorf("iser: post login receive: %w", err)
			}
			return nil
		}
	}
	return nil // all posted already
}

// queueSendLocked queues a SEND from send slot i; Kick posts it. SENDs go
// out in the order they were queued (the CmdSN order of their commands).
//
// Most SENDs are unsignaled: the send queue completes in order, so the
// completion of a signaled SEND says that every SEND before it is done
// with its slot too (retireLocked). One in iserSignalEvery is signaled,
// and the one that takes the last free slot, so that slots always come
// back.
// A slot's buffer is thus reused only after the device has finished
// reading it; immediate data lies in the command's own buffer, which its
// response (after the SEND was received) releases. Nothing is ever
// invalidated, so a retransmission after the response reads valid
// memory: the hazard that made Linux's iser signal every SEND (per-command
// registrations invalidated at completion) does not exist here.
func (d *ISERDatamover) queueSendLocked(i int, sges []rdma.SGE) {
	d.sinceSignal++
	signaled := d.sinceSignal >= iserSignalEvery || len(d.freeSend) == 0
	if signaled {
		d.sinceSignal = 0
	}
	d.inSQ[(d.sqHead+d.sqLen)%len(d.inSQ)] = i
	d.sqLen++
	d.pending = append(d.pending, rdma.SendWR{ID: wrSend | uint64(i), SGEs: sges, Signaled: signaled, Op: rdma.OpSend})
}

// retireLocked frees send slot i, whose SEND completed, and the slots of
// every SEND queued before it.
func (d *ISERDatamover) retireLocked(i int) {
	for k := 0; k < d.sqLen; k++ {
		if d.inSQ[(d.sqHead+k)%len(d.inSQ)] != i {
			continue
		}
		for ; k >= 0; k-- {
			d.freeSend = append(d.freeSend, d.inSQ[d.sqHead])
			d.sqHead = (d.sqHead + 1) % len(d.inSQ)
			d.sqLen--
		}
		return
	}
	// Not in the send queue: freed already by a later completion (a
	// flushed unsignaled SEND after a signaled one).
}

// Kick posts the queued SENDs. Many goroutines may call it: the first posts
// everything queued, including what others queue meanwhile, in batches of
// one ibv_post_send each; the rest return at once. The session calls it
// after queuing a command and releasing its own lock, so concurrent
// commands share a post.
func (d *ISERDatamover) Kick() error { return d.kick(false) }

// kick posts what is queued; held back while a batch is open unless
// unplugging (one batch's end posts, whatever other batches are open).
func (d *ISERDatamover) kick(unplug bool) error {
	d.mu.Lock()
	if d.posting || d.plugs > 0 && !unplug {
		d.mu.Unlock()
		return nil
	}
	d.posting = true
	var err error
	for len(d.pending) > 0 && err == nil {
		batch := d.pending
		d.pending = d.spareWRs[:0]
		d.mu.Unlock()
		if perr := d.conn.PostSend(batch); perr != nil {
			err = fmt.Errorf("iser: post send: %w", perr)
		}
		d.mu.Lock()
		d.spareWRs = batch
	}
	d.posting = false
	d.mu.Unlock()
	if err != nil {
		d.fail(err)
		_ = d.conn.Disconnect()
	}
	return err
}

// Plug implements plugger: until the matching Unplug, Kick leaves what is
// queued for that Unplug to post.
func (d *ISERDatamover) Plug() {
	d.mu.Lock()
	d.plugs++
	d.mu.Unlock()
}

// Unplug implements plugger: it posts what is queued, its own batch's and
// whatever other open batches or the poller held back meanwhile, so that
// one frontend loop's pass never waits for another's.
func (d *ISERDatamover) Unplug() {
	d.mu.Lock()
	d.plugs--
	post := len(d.pending) > 0
	d.mu.Unlock()
	if post {
		_ = d.kick(true) // a failure fails the connection, and so the session
	}
}

// registered finds the region from RegisterIOBuffers b lies in and b's
// offset there; nil when b is plain memory.
func (d *ISERDatamover) registered(b []byte) (RDMAMemory, int) {
	if len(b) == 0 {
		return nil, 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, m := range d.extra {
		region := m.Bytes()
		start := uintptr(unsafe.Pointer(unsafe.SliceData(region)))
		if p >= start && p+uintptr(len(b)) <= start+uintptr(len(region)) {
			return m, int(p - start)
		}
	}
	return nil, 0
}

// RegisterIOBuffers registers memory the caller owns (page-aligned, from
// mmap) so that commands whose buffers lie in it move without a copy. A
// Nexus registers the same I/O buffers with every connection it makes, so a
// frontend keeps its buffers across reconnects.
func (d *ISERDatamover) RegisterIOBuffers(mem []byte) error {
	m, err := d.conn.RegisterBuffer(mem)
	if err != nil {
		return fmt.Errorf("iser: register %d bytes of I/O buffers: %w", len(mem), err)
	}
	d.mu.Lock()
	d.extra = append(d.extra, m)
	d.pinned += int64(len(m.Bytes()))
	d.mu.Unlock()
	return nil
}

// SendCommand implements Datamover: the command's SEND carries immediate
// data and the STag and address of the buffer the target reads or writes.
// It is queued; Kick posts it.
func (d *ISERDatamover) SendCommand(cmd *pdu.SCSICommand, t *Task) error {
	n := len(t.Read) + len(t.Write)
	buf := t.Read
	if len(t.Write) > 0 {
		buf = t.Write
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.closedErr()
	}
	st := d.reservedLocked(t) // by PrepareCommand
	if st == nil || st.sent {
		var err error
		if st, err = d.prepareLocked(t, buf); err != nil {
			return err
		}
	}
	st.sent = true
	if n > 0 && st.slot >= 0 {
		copy(st.mem.Bytes()[st.base:], t.Write)
	}
	cmd.Final = true // never unsolicited Data-Out over iSER
	st.queued = true
	d.setLiveLocked(st, true)
	if d.mustDeferLocked() {
		d.overflow = append(d.overflow, deferredSend{cmd: *cmd, t: t, st: st})
		return nil
	}
	d.sendCommandLocked(d.takeSendLocked(), cmd, t, st)
	return nil // posted by Kick, after the session's lock
}

// sendCommandLocked queues the SEND of command cmd from send slot i.
func (d *ISERDatamover) sendCommandLocked(i int, cmd *pdu.SCSICommand, t *Task, st *iserTask) {
	var addr uint64
	if len(t.Read)+len(t.Write) > 0 {
		addr = st.mem.Addr() + uint64(st.base)
	}
	imm := 0
	if len(t.Write) > 0 && d.params.ImmediateData {
		imm = min(len(t.Write), int(d.params.FirstBurstLength), int(d.params.TargetRecvDataSegmentLength), iserMaxImmediate)
	}
	h := pdu.ISERHeader{Flags: pdu.ISERFlagControl}
	if len(t.Read) > 0 {
		h.Flags |= pdu.ISERFlagRSV
		h.ReadSTag, h.ReadVA = st.mem.RKey(), addr
	}
	if len(t.Write) > imm {
		// The target RDMA-READs what immediate data did not carry: the
		// address is past the bytes already sent (the write offset rule).
		h.Flags |= pdu.ISERFlagWSV
		h.WriteSTag, h.WriteVA = st.mem.RKey(), addr+uint64(imm)
	}
	sbuf, saddr := d.sendSlot(i)
	h.Marshal(sbuf)
	var b pdu.BHS
	cmd.Marshal(&b)
	b.SetDataSegmentLength(imm)
	copy(sbuf[pdu.ISERHeaderLen:], b[:])
	sges := d.sges[i][:1]
	sges[0] = rdma.SGE{Addr: saddr, Length: iserHeadersLen, LKey: d.ctrl.LKey()}
	if imm > 0 {
		sges = append(sges, rdma.SGE{Addr: addr, Length: uint32(imm), LKey: st.mem.LKey()})
	}
	d.queueSendLocked(i, sges)
}

// PrepareCommand implements CommandPreparer: it reserves t's bounce slot
// (registering another chunk of the pool if need be) before the session
// gives the command a CmdSN, so that a shortage of registered memory fails
// only this command. SendCommand uses the reservation; TaskDone returns it
// when the command was never sent.
func (d *ISERDatamover) PrepareCommand(t *Task) error {
	buf := t.Read
	if len(t.Write) > 0 {
		buf = t.Write
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("iser: prepare command: %w: %w", errConnectionEnded, d.closedErr())
	}
	_, err := d.prepareLocked(t, buf)
	return err
}

// prepareLocked finds the registered memory t's buffer moves through: the
// caller's (RegisterIOBuffers) or a bounce slot.
func (d *ISERDatamover) prepareLocked(t *Task, buf []byte) (*iserTask, error) {
	n := len(t.Read) + len(t.Write)
	if n > d.slot {
		return nil, fmt.Errorf("iser: %d-byte transfer exceeds %d", n, d.slot)
	}
	// The memory first: a reservation that fails leaves no entry behind
	// (reservedLocked would take it for a good one).
	slot, base := -1, 0
	var mem RDMAMemory
	if n > 0 {
		if mem, base = d.registered(buf); mem == nil {
			var err error
			if slot, mem, base, err = d.bounceSlotLocked(); err != nil {
				return nil, err
			}
		}
	}
	st := d.entryLocked(t)
	st.slot, st.mem, st.base = slot, mem, base
	return st, nil
}

func (d *ISERDatamover) releaseLocked(st *iserTask) {
	if st.slot >= 0 {
		d.freeData = append(d.freeData, st.slot)
		st.slot = -1
	}
}

// TaskDone implements Datamover. After a SCSI Response the target is done
// with the buffer: read data is copied out of a bounce slot and the slot
// reused. Without one the slot is kept out of use until teardown, so a late
// RDMA WRITE cannot land in a reused buffer, unless a completed task
// management function ended the task (its response came after the task's
// RDMA on the same RC connection) or the target Rejected the command (it
// never started): then the slot is reused, uncopied.
func (d *ISERDatamover) TaskDone(t *Task) {
	d.mu.Lock()
	st := d.reservedLocked(t)
	if st == nil || d.liveLocked(t.ITT) != st {
		if st != nil && !st.queued {
			d.releaseLocked(st)        // reserved, never sent: the target never saw it
			d.setLiveLocked(st, false) // an entry beyond ents is forgotten
		}
		d.mu.Unlock()
		return
	}
	d.setLiveLocked(st, false)
	responded, rejected := st.responded, st.rejected
	d.mu.Unlock()
	if st.slot < 0 || !responded && !t.ended && !rejected {
		return
	}
	if !responded {
		d.mu.Lock()
		d.releaseLocked(st)
		d.mu.Unlock()
		return
	}
	if len(t.Read) > 0 {
		d.memMu.RLock()
		if !d.memGone {
			copy(t.Read, st.mem.Bytes()[st.base:st.base+len(t.Read)])
		}
		d.memMu.RUnlock()
	}
	d.mu.Lock()
	d.releaseLocked(st)
	d.mu.Unlock()
}

// Recv implements Datamover.
func (d *ISERDatamover) Recv() (*pdu.PDU, error) {
	p, ok := <-d.pdus
	if !ok {
		d.mu.Lock()
		defer d.mu.Unlock()
		return nil, d.closedErr()
	}
	return p, nil
}

// ReceiveInline implements InlineReceiver: from now on the poller hands
// each received PDU to h itself, on its own goroutine, once those already
// queued for Recv are taken. An error from h ends the connection.
func (d *ISERDatamover) ReceiveInline(h func(*pdu.PDU) error) {
	d.inline.Store(&h)
}

// StartClose implements InlineReceiver: it begins Close without waiting for
// the poller, which may be the caller (from an inline handler). Close
// still has to be called to finish.
func (d *ISERDatamover) StartClose() {
	d.mu.Lock()
	d.closed = true
	d.revokeLocked()
	d.mu.Unlock()
	d.stopOnce.Do(func() { close(d.stop) })
}

// fail records the first error and wakes senders.
func (d *ISERDatamover) fail(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.closed = true
	d.revokeLocked()
	d.mu.Unlock()
}

// poller owns the completion queue until the connection drains or
// closes, except while a loop reaps it (iser_reap.go): then it parks.
func (d *ISERDatamover) poller() {
	defer close(d.pollerOut)
	defer close(d.pdus)
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-d.stop:
			cancel()
		case <-base.Done():
		}
	}()
	wcs := make([]rdma.Completion, iserPollBatch)
	var ctx context.Context
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		var polling bool
		if ctx, polling = d.pollCtx(base, ctx); !polling {
			select {
			case <-d.unpark:
			case <-d.stop:
				return
			}
			continue
		}
		d.reapMu.Lock()
		n, err := d.conn.Poll(ctx, wcs)
		if err != nil && base.Err() == nil && ctx.Err() != nil {
			d.reapMu.Unlock()
			continue // a loop took the CQ over
		}
		if err != nil {
			d.reapMu.Unlock()
			d.fail(fmt.Errorf("iser: connection: %w", err))
			return
		}
		d.completeAll(wcs[:n])
		d.reapMu.Unlock()
	}
}

// complete handles one work completion.
func (d *ISERDatamover) complete(wc *rdma.Completion) error {
	idx := int(wc.ID &^ wrMask)
	switch wc.ID & wrMask {
	case wrSend:
		d.mu.Lock()
		d.retireLocked(idx)
		kick := len(d.overflow) > 0 && d.sendDeferredLocked()
		closed := d.closed
		d.mu.Unlock()
		if err := wc.Err(); err != nil && !closed {
			return fmt.Errorf("iser: send: %w", err)
		}
		if kick {
			return d.Kick()
		}
		return nil
	case wrRecv:
		d.mu.Lock()
		d.posted[idx] = false
		closed := d.closed
		d.mu.Unlock()
		if err := wc.Err(); err != nil {
			if closed {
				return nil
			}
			return fmt.Errorf("iser: receive: %w", err)
		}
		if h := d.inline.Load(); h != nil && len(d.pdus) == 0 {
			// Parsed in place: the handler is done with the PDU, which
			// points into receive buffer idx, before idx is reposted.
			if err := d.parseRecv(idx, wc, &d.rx, false); err != nil {
				return err
			}
			if err := (*h)(&d.rx); err != nil {
				return err
			}
			d.rx = pdu.PDU{}
			return d.repost(idx)
		}
		p := new(pdu.PDU)
		if err := d.parseRecv(idx, wc, p, true); err != nil {
			return err
		}
		// Posted now, not with the batch: the send to the reader may wait.
		if err := d.repost(idx); err != nil {
			return err
		}
		if err := d.flushReposts(); err != nil {
			return err
		}
		select {
		case d.pdus <- p:
		case <-d.stop:
		}
		return nil
	}
	return fmt.Errorf("iser: completion with unknown id %#x", wc.ID)
}

// repost queues receive buffer i to be posted again once its PDU has been
// handled; the queue is posted when it holds iserRepostBatch and when a
// batch of completions ends (flushReposts). Under reapMu, like every
// completion.
func (d *ISERDatamover) repost(i int) error {
	d.mu.Lock()
	if d.closed || d.posted[i] {
		d.mu.Unlock()
		return nil
	}
	d.posted[i] = true
	d.mu.Unlock()
	d.reposts = append(d.reposts, d.recvWR(i))
	if len(d.reposts) >= iserRepostBatch {
		return d.flushReposts()
	}
	return nil
}

// flushReposts posts the queued receives with one call. Under reapMu.
func (d *ISERDatamover) flushReposts() error {
	if len(d.reposts) == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	wrs := d.reposts
	d.reposts = d.reposts[:0]
	if d.closed {
		return nil
	}
	if err := d.conn.PostRecv(wrs); err != nil {
		return fmt.Errorf("iser: repost %d receives: %w", len(wrs), err)
	}
	return nil
}

// parseRecv parses the PDU in receive buffer i into p: its AHS and data
// segment are copied when copied is set, else they point into the buffer.
func (d *ISERDatamover) parseRecv(i int, wc *rdma.Completion, p *pdu.PDU, copied bool) error {
	if wc.HasInvalidate {
		return fmt.Errorf("iser: target invalidated rkey %#x, refused in the CM private data", wc.InvalidatedRKey)
	}
	n := int(wc.ByteLen)
	if n < iserHeadersLen || n > iserRecvBufLen {
		return fmt.Errorf("iser: received %d bytes", n)
	}
	buf := d.ctrl.Bytes()[i*iserRecvBufLen : i*iserRecvBufLen+n]
	var h pdu.ISERHeader
	if err := h.Unmarshal(buf); err != nil {
		return err
	}
	copy(p.BHS[:], buf[pdu.ISERHeaderLen:])
	op := p.BHS.Opcode()
	if !op.Known() || !op.FromTarget() {
		return pdu.ProtocolErrorf(op, "unexpected opcode from target")
	}
	ahs, dlen := p.BHS.TotalAHSLength(), p.BHS.DataSegmentLength()
	rest := n - iserHeadersLen - ahs
	if rest < dlen || rest > dlen+3 {
		return pdu.ProtocolErrorf(op, "data segment length %d in a %d-byte receive", dlen, n)
	}
	p.AHS, p.Data = nil, nil
	if ahs > 0 {
		p.AHS = buf[iserHeadersLen : iserHeadersLen+ahs : iserHeadersLen+ahs]
	}
	if dlen > 0 {
		p.Data = buf[iserHeadersLen+ahs : iserHeadersLen+ahs+dlen : iserHeadersLen+ahs+dlen]
	}
	if copied {
		p.AHS, p.Data = bytes.Clone(p.AHS), bytes.Clone(p.Data)
	}
	switch op {
	case pdu.OpDataIn, pdu.OpR2T:
		return pdu.ProtocolErrorf(op, "not used over iSER: data moves by RDMA")
	case pdu.OpSCSIResponse:
		d.markResponded(p.BHS.ITT()) // RC ordering: its RDMA WRITEs landed first
	case pdu.OpReject:
		if itt, ok := rejectedCommand(p); ok {
			d.mu.Lock()
			if st := d.liveLocked(itt); st != nil {
				st.rejected = true
			}
			d.mu.Unlock()
		}
	}
	return nil
}

// markResponded records that the target is done with task itt's buffer:
// TaskDone may copy out of its bounce slot and reuse it.
func (d *ISERDatamover) markResponded(itt uint32) {
	d.mu.Lock()
	if st := d.liveLocked(itt); st != nil {
		st.responded = true
	}
	d.mu.Unlock()
}

// rejectedCommand returns the ITT of the SCSI Command a Reject PDU carries
// in its data segment. A rejected SCSI Command never became a task (RFC
// 7143 section 11.17: the rejected PDU is discarded, and a target may not
// end an active task with a Reject), so the target never RDMAs its buffer;
// any RDMA before the Reject's SEND would have landed first (RC ordering).
func rejectedCommand(p *pdu.PDU) (uint32, bool) {
	if len(p.Data) < pdu.BHSLen {
		return 0, false
	}
	var rb pdu.BHS
	copy(rb[:], p.Data[:pdu.BHSLen])
	if rb.Opcode() != pdu.OpSCSICommand || rb.ITT() == pdu.ReservedTag {
		return 0, false
	}
	return rb.ITT(), true
}

// Close implements Datamover. It stops the poller, waits out a loop's
// Reap, then closes the RDMA connection, which disconnects, drains every outstanding work request and
// only then deregisters the memory; copies out of bounce slots are
// excluded meanwhile. Idempotent.
func (d *ISERDatamover) Close() error {
	d.closeOnce.Do(func() {
		d.StartClose()
		<-d.pollerOut
		// A loop's Reap under way finishes first (StartClose revoked it;
		// a later one sees closed and does nothing).
		d.reapMu.Lock()
		d.memMu.Lock()
		d.memGone = true
		_ = d.conn.Close()
		d.memMu.Unlock()
		d.reapMu.Unlock()
	})
	return nil
}
