package initiator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// TCPDatamover is the iSCSI/TCP datamover (RFC 7143 over a TCP connection).
//
// It owns two goroutines' worth of work: the caller of Recv reads the socket
// and places Data-In directly in task buffers; a writer goroutine, started by
// DialTCP and stopped by Close, drains a queue of outgoing PDUs with one
// writev per batch, so that answering an R2T never blocks the reader.
type TCPDatamover struct {
	conn net.Conn
	r    *bufio.Reader

	mu     rankedMutex[datamoverRank] // guards params, ents and the write queue; after the session's (lockorder.go)
	params Params
	ffp    bool        // full feature phase: digests and negotiated lengths apply
	ents   []*tcpEntry // by task index (the ITT's low bits)
	queue  net.Buffers
	wake   *sync.Cond
	werr   error // first write error; sticky
	closed bool
	// Inline writes (tcp_kick.go): writing is set while the writer
	// goroutine or a Kick writes the socket; plugs counts open batches.
	writing bool
	inline  bool // the writing is a Kick's (which never waits)
	// called asks the writer goroutine to write what is queued: control
	// PDUs, R2T answers, and what an inline write left. Commands a Kick
	// will write are left alone.
	called  bool
	written *sync.Cond // an inline or writer write ended (TaskDone, Close)
	plugs   int
	raw     syscall.RawConn // nil: only the writer goroutine writes
	handed  atomic.Uint64   // writes left to the writer goroutine

	closeOnce sync.Once
	writerOut chan struct{}
	hdr       [pdu.BHSLen + 4]byte // reader's scratch header (+ digest)
}

// tcpEntry is the datamover's hold on one task index (the ITT's low bits):
// the command in flight there and its data state. An entry is made once
// per index and reused, so a command allocates nothing here.
type tcpEntry struct {
	t   *Task // nil when no command is in flight at this index
	itt uint32
	st  tcpTaskState
}

// entryLocked returns the entry of itt's index, made on first use.
func (d *TCPDatamover) entryLocked(itt uint32) *tcpEntry {
	i := ittIndex(itt)
	if i >= len(d.ents) {
		d.ents = append(d.ents, make([]*tcpEntry, i+1-len(d.ents))...)
	}
	if d.ents[i] == nil {
		d.ents[i] = new(tcpEntry)
	}
	return d.ents[i]
}

// taskLocked returns the command in flight with itt and its data state,
// or nil (none, or one with another generation of the index).
func (d *TCPDatamover) taskLocked(itt uint32) (*Task, *tcpTaskState) {
	if i := ittIndex(itt); i < len(d.ents) {
		if e := d.ents[i]; e != nil && e.t != nil && e.itt == itt {
			return e.t, &e.st
		}
	}
	return nil, nil
}

// tcpTaskState is the TCP datamover's per-task data state.
type tcpTaskState struct {
	expDataSN uint32
	// nextOffset is where the next Data-In must start: the bytes received
	// so far, since DataPDUInOrder and DataSequenceInOrder are Yes (we
	// offer Yes and both keys are ORed, so the target cannot say No).
	nextOffset uint32
	cmd        pdu.SCSICommand
}

// DialTCP connects to an iSCSI portal (host:port) over TCP.
func DialTCP(ctx context.Context, addr string) (*TCPDatamover, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial iscsi/tcp %s: %w", addr, err)
	}
	return NewTCPDatamover(c), nil
}

// NewTCPDatamover runs the iSCSI/TCP datamover over an established
// connection (used by DialTCP and by tests with net.Pipe).
func NewTCPDatamover(c net.Conn) *TCPDatamover {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
	}
	d := &TCPDatamover{
		conn:      c,
		r:         bufio.NewReaderSize(c, 256<<10),
		params:    DefaultParams(),
		writerOut: make(chan struct{}),
	}
	d.wake = sync.NewCond(&d.mu)
	d.written = sync.NewCond(&d.mu)
	if sc, ok := c.(syscall.Conn); ok {
		d.raw, _ = sc.SyscallConn()
	}
	go d.writer()
	return d
}

// Transport implements Datamover.
func (d *TCPDatamover) Transport() string { return "tcp" }

// RemoteAddr implements Datamover.
func (d *TCPDatamover) RemoteAddr() string { return d.conn.RemoteAddr().String() }

// OperationalKeys implements Datamover: iSCSI/TCP offers the RFC 7143 keys.
func (d *TCPDatamover) OperationalKeys(n *textkey.Negotiation, want Params) {
	n.Offer("HeaderDigest", digestOffer(want.HeaderDigest))
	n.Offer("DataDigest", digestOffer(want.DataDigest))
	n.Offer("MaxRecvDataSegmentLength", fmt.Sprint(want.InitiatorMaxRecvDataSegmentLength))
}

func digestOffer(want bool) string {
	if want {
		return "CRC32C,None"
	}
	return "None"
}

// AllocateConnectionResources implements Datamover; TCP needs nothing.
func (d *TCPDatamover) AllocateConnectionResources(Params) error { return nil }

// NoticeKeyValues implements Datamover: digests and lengths apply from the
// first full-feature-phase PDU on.
func (d *TCPDatamover) NoticeKeyValues(p Params) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.params, d.ffp = p, true
	return nil
}

// Close implements Datamover. It closes the socket (unblocking Recv),
// stops the writer and waits for it.
func (d *TCPDatamover) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		if d.werr == nil {
			d.werr = net.ErrClosed
		}
		d.wake.Broadcast()
		d.mu.Unlock()
		_ = d.conn.Close()
		<-d.writerOut
		// A Kick writing inline ends soon (it never waits, and the socket
		// is closed); after Close no buffer is read any more.
		d.mu.Lock()
		for d.writing {
			d.written.Wait()
		}
		d.mu.Unlock()
	})
	return nil
}

// writer drains the queue. It exits when the datamover closes or a write fails.
func (d *TCPDatamover) writer() {
	defer close(d.writerOut)
	for {
		d.mu.Lock()
		for (!d.called || d.writing) && !d.closed {
			d.wake.Wait()
		}
		if d.closed {
			d.mu.Unlock()
			return
		}
		d.called = false
		if len(d.queue) == 0 {
			d.mu.Unlock()
			continue // an inline write took it
		}
		bufs := d.queue
		d.queue, d.writing = nil, true
		d.mu.Unlock()
		d.handed.Add(1)
		_, err := bufs.WriteTo(d.conn)
		d.mu.Lock()
		d.writing = false
		d.written.Broadcast() // Close may wait for the write to end
		if len(d.queue) > 0 {
			d.called = true // Kicks left what came meanwhile to this write
		}
		if err != nil {
			if d.werr == nil {
				d.werr = fmt.Errorf("iscsi/tcp write: %w", err)
			}
			d.closed = true
			d.mu.Unlock()
			_ = d.conn.Close()
			return
		}
		d.mu.Unlock()
	}
}

// enqueueLocked frames one PDU onto the write queue. d.mu is held.
func (d *TCPDatamover) enqueueLocked(bhs *pdu.BHS, ahs, data []byte) error {
	if d.werr != nil {
		return d.werr
	}
	hd, dd := d.ffp && d.params.HeaderDigest, d.ffp && d.params.DataDigest
	if len(ahs)%4 != 0 || len(ahs) > 255*4 {
		return fmt.Errorf("iscsi/tcp send %s: bad AHS length %d", bhs.Opcode(), len(ahs))
	}
	if len(data) > pdu.MaxDataSegmentLength {
		return fmt.Errorf("iscsi/tcp send %s: data segment %d too long", bhs.Opcode(), len(data))
	}
	bhs.SetTotalAHSLength(len(ahs))
	bhs.SetDataSegmentLength(len(data))
	hlen := pdu.BHSLen + len(ahs)
	if hd {
		hlen += 4
	}
	h := make([]byte, hlen)
	copy(h, bhs[:])
	copy(h[pdu.BHSLen:], ahs)
	if hd {
		pdu.PutDigest(h[pdu.BHSLen+len(ahs):], pdu.CRC32C(h[:pdu.BHSLen+len(ahs)]))
	}
	d.queue = append(d.queue, h)
	if len(data) > 0 {
		pad := pdu.PadLen(len(data))
		d.queue = append(d.queue, data)
		if pad > 0 || dd {
			tail := make([]byte, pad, pad+4)
			if dd {
				tail = tail[:pad+4]
				pdu.PutDigest(tail[pad:], pdu.CRC32C(data, zeroPad[:pad]))
			}
			d.queue = append(d.queue, tail)
		}
	}
	return nil
}

// SendPDU implements Datamover: the writer goroutine sends it.
func (d *TCPDatamover) SendPDU(p *pdu.PDU) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.enqueueLocked(&p.BHS, p.AHS, p.Data)
	d.callWriterLocked()
	return err
}

// SendCommand implements Datamover. The session's Kick, after its lock,
// sends the command (tcp_kick.go).
func (d *TCPDatamover) SendCommand(cmd *pdu.SCSICommand, t *Task) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.werr != nil {
		return d.werr
	}
	e := d.entryLocked(t.ITT)
	e.t, e.itt, e.st = t, t.ITT, tcpTaskState{cmd: *cmd}
	t.Received, t.DataCounted = 0, true
	var imm []byte
	unsolicited := 0
	if len(t.Write) > 0 {
		imm = t.Write[:min(len(t.Write), int(d.params.ImmediateLimit()))]
		unsolicited = min(len(t.Write), int(d.params.UnsolicitedLimit())) - len(imm)
	}
	cmd.Final = unsolicited <= 0
	var b pdu.BHS
	cmd.Marshal(&b)
	if err := d.enqueueLocked(&b, nil, imm); err != nil {
		e.t = nil
		return err
	}
	if unsolicited > 0 {
		return d.sendDataOutLocked(t, pdu.ReservedTag, uint32(len(imm)), uint32(unsolicited), cmd.ExpStatSN)
	}
	return nil
}

// sendDataOutLocked queues Data-Out PDUs for n bytes of t's write buffer
// from off, each within the target's MaxRecvDataSegmentLength.
func (d *TCPDatamover) sendDataOutLocked(t *Task, ttt, off, n, expStatSN uint32) error {
	mrdsl := d.params.TargetMaxRecvDataSegmentLength
	end := off + n
	var sn uint32
	for off < end {
		l := min(end-off, mrdsl)
		do := pdu.DataOut{Final: off+l == end, LUN: t.LUN, ITT: t.ITT, TTT: ttt,
			ExpStatSN: expStatSN, DataSN: sn, BufferOffset: off}
		var b pdu.BHS
		do.Marshal(&b)
		if err := d.enqueueLocked(&b, nil, t.Write[off:off+l]); err != nil {
			return err
		}
		off += l
		sn++
	}
	return nil
}

// TaskDone implements Datamover. It waits for a placement in progress.
func (d *TCPDatamover) TaskDone(t *Task) {
	d.mu.Lock()
	// A Kick may be writing t's data just now (a target may end a write
	// before it has all of it); it never waits, so neither does this.
	// Data the writer goroutine holds is not waited for: it may wait on
	// the socket, and this runs on the reader (docs/architecture.md).
	for d.inline {
		d.written.Wait()
	}
	if dt, _ := d.taskLocked(t.ITT); dt == t {
		d.ents[ittIndex(t.ITT)].t = nil
	}
	d.mu.Unlock()
	t.mu.Lock()
	t.done = true
	t.mu.Unlock()
}

// lookup returns the command in flight with itt and its data state, which
// the caller may use only under the Task's mu, once it has seen the Task
// still this ITT's and not done (the index is reused only after TaskDone,
// which takes that mu).
func (d *TCPDatamover) lookup(itt uint32) (*Task, *tcpTaskState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.taskLocked(itt)
}

// Recv implements Datamover.
func (d *TCPDatamover) Recv() (*pdu.PDU, error) {
	for {
		p, err := d.recvOne()
		if err != nil || p != nil {
			return p, err
		}
	}
}

var errDigest = errors.New("digest mismatch")

// zeroPad is the source of the pad bytes written after a data segment.
var zeroPad [4]byte

func (d *TCPDatamover) recvOne() (*pdu.PDU, error) {
	d.mu.Lock()
	hd, dd, ffp := d.ffp && d.params.HeaderDigest, d.ffp && d.params.DataDigest, d.ffp
	maxData := d.params.InitiatorMaxRecvDataSegmentLength
	d.mu.Unlock()
	if !ffp || maxData < 8192 {
		maxData = max(maxData, 8192)
	}
	p := &pdu.PDU{}
	if _, err := io.ReadFull(d.r, p.BHS[:]); err != nil {
		return nil, d.readErr("read BHS", err)
	}
	op := p.BHS.Opcode()
	if !op.Known() || !op.FromTarget() {
		return nil, pdu.ProtocolErrorf(op, "unexpected opcode from target")
	}
	if n := p.BHS.TotalAHSLength(); n > 0 {
		p.AHS = make([]byte, n)
		if _, err := io.ReadFull(d.r, p.AHS); err != nil {
			return nil, d.readErr("read AHS", err)
		}
	}
	if hd {
		if _, err := io.ReadFull(d.r, d.hdr[:4]); err != nil {
			return nil, d.readErr("read header digest", err)
		}
		if pdu.ParseDigest(d.hdr[:4]) != pdu.CRC32C(p.BHS[:], p.AHS) {
			return nil, pdu.ProtocolErrorf(op, "header %v", errDigest)
		}
	}
	dlen := p.BHS.DataSegmentLength()
	if uint32(dlen) > maxData {
		return nil, pdu.ProtocolErrorf(op, "data segment length %d exceeds MaxRecvDataSegmentLength %d", dlen, maxData)
	}
	switch op {
	case pdu.OpDataIn:
		return d.recvDataIn(p, dlen, dd)
	case pdu.OpR2T:
		if dlen != 0 {
			return nil, pdu.ProtocolErrorf(op, "R2T with a data segment")
		}
		return nil, d.handleR2T(p)
	}
	if dlen > 0 {
		p.Data = make([]byte, dlen+pdu.PadLen(dlen))
		if _, err := io.ReadFull(d.r, p.Data); err != nil {
			return nil, d.readErr("read data segment", err)
		}
		if err := d.checkDataDigest(op, dd, p.Data); err != nil {
			return nil, err
		}
		p.Data = p.Data[:dlen]
	}
	return p, nil
}

func (d *TCPDatamover) checkDataDigest(op pdu.Opcode, dd bool, padded []byte) error {
	if !dd {
		return nil
	}
	if _, err := io.ReadFull(d.r, d.hdr[:4]); err != nil {
		return d.readErr("read data digest", err)
	}
	if pdu.ParseDigest(d.hdr[:4]) != pdu.CRC32C(padded) {
		return pdu.ProtocolErrorf(op, "data %v", errDigest)
	}
	return nil
}

func (d *TCPDatamover) readErr(what string, err error) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("iscsi/tcp %s: %w", what, net.ErrClosed)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("iscsi/tcp %s: connection closed by target: %w", what, err)
	}
	return fmt.Errorf("iscsi/tcp %s: %w", what, err)
}

// recvDataIn places a Data-In segment in its task's buffer. It returns the
// PDU only when it carries status.
func (d *TCPDatamover) recvDataIn(p *pdu.PDU, dlen int, dd bool) (*pdu.PDU, error) {
	var di pdu.DataIn
	if err := di.Unmarshal(&p.BHS); err != nil {
		return nil, err
	}
	pad := pdu.PadLen(dlen)
	t, st := d.lookup(di.ITT)
	if t != nil {
		// The session reuses a Task for its next command once TaskDone
		// returned: under mu the Task must still be this ITT's.
		t.mu.Lock()
		if t.done || t.ITT != di.ITT {
			t.mu.Unlock()
			t = nil
		}
	}
	if t == nil {
		// A task that was aborted or timed out: drop its data.
		if err := d.discard(dlen + pad); err != nil {
			return nil, err
		}
		if err := d.checkDataDigestDiscarded(dd); err != nil {
			return nil, err
		}
		if di.HasStatus {
			return p, nil
		}
		return nil, nil
	}
	end := uint64(di.BufferOffset) + uint64(dlen)
	if end > uint64(len(t.Read)) {
		t.mu.Unlock()
		return nil, pdu.ProtocolErrorf(pdu.OpDataIn, "ITT 0x%x: data at offset %d length %d beyond the %d-byte read buffer",
			di.ITT, di.BufferOffset, dlen, len(t.Read))
	}
	if di.DataSN != st.expDataSN {
		t.mu.Unlock()
		return nil, pdu.ProtocolErrorf(pdu.OpDataIn, "ITT 0x%x: DataSN %d, expected %d", di.ITT, di.DataSN, st.expDataSN)
	}
	if di.BufferOffset != st.nextOffset && dlen > 0 {
		// In-order data leaves no gap and no overlap; a segment elsewhere
		// would leave stale bytes in the buffer while the count adds up.
		// (An empty segment, status only, places nothing.)
		t.mu.Unlock()
		return nil, pdu.ProtocolErrorf(pdu.OpDataIn, "ITT 0x%x: Data-In at offset %d, expected %d (in-order data)",
			di.ITT, di.BufferOffset, st.nextOffset)
	}
	st.expDataSN++
	st.nextOffset += uint32(dlen)
	buf := t.Read[di.BufferOffset:end]
	_, err := io.ReadFull(d.r, buf)
	t.Received += uint32(dlen)
	t.mu.Unlock()
	if err != nil {
		return nil, d.readErr("read Data-In", err)
	}
	var padb [4]byte
	if pad > 0 {
		if _, err := io.ReadFull(d.r, padb[:pad]); err != nil {
			return nil, d.readErr("read Data-In padding", err)
		}
	}
	if dd {
		if _, err := io.ReadFull(d.r, d.hdr[:4]); err != nil {
			return nil, d.readErr("read data digest", err)
		}
		if pdu.ParseDigest(d.hdr[:4]) != pdu.CRC32C(buf, padb[:pad]) {
			return nil, pdu.ProtocolErrorf(pdu.OpDataIn, "data %v", errDigest)
		}
	}
	if di.HasStatus {
		return p, nil
	}
	return nil, nil
}

func (d *TCPDatamover) discard(n int) error {
	if _, err := d.r.Discard(n); err != nil {
		return d.readErr("discard data", err)
	}
	return nil
}

func (d *TCPDatamover) checkDataDigestDiscarded(dd bool) error {
	if dd {
		return d.discard(4)
	}
	return nil
}

// handleR2T answers an R2T with Data-Out PDUs from the task's write buffer.
func (d *TCPDatamover) handleR2T(p *pdu.PDU) error {
	var r pdu.R2T
	if err := r.Unmarshal(&p.BHS); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	t, st := d.taskLocked(r.ITT)
	if t == nil {
		return nil // aborted task
	}
	end := uint64(r.BufferOffset) + uint64(r.DesiredDataTransferLength)
	if end > uint64(len(t.Write)) {
		return pdu.ProtocolErrorf(pdu.OpR2T, "ITT 0x%x: R2T for offset %d length %d beyond the %d-byte write buffer",
			r.ITT, r.BufferOffset, r.DesiredDataTransferLength, len(t.Write))
	}
	if r.DesiredDataTransferLength > d.params.MaxBurstLength {
		return pdu.ProtocolErrorf(pdu.OpR2T, "desired length %d exceeds MaxBurstLength %d",
			r.DesiredDataTransferLength, d.params.MaxBurstLength)
	}
	err := d.sendDataOutLocked(t, r.TTT, r.BufferOffset, r.DesiredDataTransferLength, st.cmd.ExpStatSN)
	d.callWriterLocked() // the reader never writes: answering must not block it
	return err
}
