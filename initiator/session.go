package initiator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/rs/zerolog"
)

// SessionConfig configures a session: who logs in, and how it runs.
type SessionConfig struct {
	LoginConfig
	// QueueDepth caps the SCSI commands in flight (default 128).
	QueueDepth int
	// NOPInterval is how often an idle connection is probed with a NOP-Out
	// (default 5 s; negative disables); NOPTimeout is how long the NOP-In
	// may take (default 5 s).
	NOPInterval, NOPTimeout time.Duration
	// CommandTimeout bounds how long a SCSI command waits for its status,
	// and how long the CmdSN window may stay closed while a command waits
	// for it (default DefaultCommandTimeout; negative disables). A command
	// that times out is aborted with ABORT TASK, then LOGICAL UNIT RESET,
	// then the session is dropped (see Session.Do).
	CommandTimeout time.Duration
	Logger         zerolog.Logger

	// timeouts counts command timeouts; a Nexus shares one counter with
	// all its sessions. Nil: the session counts for itself.
	timeouts *atomic.Uint64
}

// DefaultCommandTimeout is the default SessionConfig.CommandTimeout, the
// Linux SCSI layer's default command timeout.
const DefaultCommandTimeout = 30 * time.Second

// ErrSessionClosed is returned for I/O on a session that was closed.
var ErrSessionClosed = errors.New("iscsi session closed")

// ErrCommandTimeout is wrapped by the error of a SCSI command that got no
// status within the command timeout.
var ErrCommandTimeout = errors.New("scsi command timed out")

// ErrWindowClosed is wrapped by the session error when the target kept the
// CmdSN window closed for longer than the command timeout.
var ErrWindowClosed = errors.New("CmdSN window closed too long")

// ErrTaskAborted is wrapped by the error of a command that ABORT TASK or
// LOGICAL UNIT RESET ended at the target: the target no longer runs it,
// so it may be issued again.
var ErrTaskAborted = errors.New("task aborted at the target")

// ErrTargetLogout is wrapped by the session error when the target asked for
// a logout or dropped the connection (Async Message events 1 to 3).
var ErrTargetLogout = errors.New("target requested logout")

// maxStatSNGap is how far a StatSN may stray from ExpStatSN before the
// session treats it as out of window.
const maxStatSNGap = 1 << 12

// Session is a logged-in iSCSI session over one connection, in full feature
// phase. It is safe for concurrent use: many goroutines issue commands,
// blocking (Do) or with a callback (Submit).
//
// Every request in flight has an entry in a task array (task.go), found by
// the index in its ITT; a generation in the ITT's high bits tells the uses
// of an entry apart.
//
// Goroutines: NewSession starts a reader (dispatches every PDU from the
// datamover and runs the callbacks of the commands it completes) and a
// keepalive (NOP-Out pings); one timer (the watchdog) fires at the oldest
// command deadline, and a LUN with a command to end at the target gets an
// error-handling goroutine while it has one (eh.go). Close, or a connection
// failure, ends them in this order: the session error is set (no new
// request is issued; commands not yet sent end at once; the requests in
// flight are parked), the datamover is closed (the socket closed or the
// queue pair drained and destroyed), which unblocks the reader; the reader,
// once it has stopped placing data, closes the datamover again (waiting for
// a Close in progress) and only then releases the parked requests (waiters
// and callbacks). The keepalive is stopped, and Close waits for all of
// them. So no caller is told its command ended while the old connection can
// still place data in its buffer.
type Session struct {
	dm Datamover
	// borrowed: the datamover hands PDUs to dispatch only for the call
	// (InlineReceiver); what a waiter reads later is copied.
	borrowed bool
	// The datamover's optional capabilities, looked up once.
	kicker   kicker
	plugger  plugger
	reaps    reapSource
	preparer CommandPreparer
	cfg      SessionConfig
	params   Params
	tsih     uint16
	log      zerolog.Logger

	// slots holds a token per SCSI command entry in use (the queue
	// depth semaphore Do waits on); ctlSem the same for control entries.
	slots  chan struct{}
	ctlSem chan struct{}

	mu        rankedMutex[sessionRank] // after the datamover's reapMu, before its mu (lockorder.go)
	cmdSN     uint32
	expCmdSN  uint32
	maxCmdSN  uint32
	expStatSN uint32
	windowCh  chan struct{} // made by a waiter, closed when MaxCmdSN moves
	tt        taskTable     // every request in flight, by the index in its ITT
	backlog   []queuedCmd   // Submits that found every command entry in use, from bhead on
	bhead     int
	ehq       []ehReq // tasks waiting for error handling
	wdArmed   bool    // the watchdog timer is set
	// sendErr is a send failure met under the lock, and kickPending says
	// commands were handed to the datamover under it: whoever releases
	// the lock posts them (kick) and fails the session (posted).
	sendErr     error
	kickPending bool
	err         error // sticky: the reason the session ended
	lastRecv    time.Time
	loggedOut   bool
	// logoutCause is why a logout the target asked for happened; the
	// connection it then closes ends the session with it.
	logoutCause error

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	failed    chan struct{} // closed by fail
	released  chan struct{} // closed by the reader once the datamover is closed
	dead      atomic.Bool   // set by fail, for lock-free checks

	ehBusy   map[[8]byte]bool // LUNs whose error handler runs (guarded by mu)
	watchdog *time.Timer      // fires at the oldest deadline (command or window)
	timeouts *atomic.Uint64
}

// kicker is a datamover that queues work under the session's lock and
// sends it when kicked after the lock is released (iSER batches posts).
type kicker interface{ Kick() error }

// plugger is a kicker whose kicks can be held back for a batch: while a
// Plug has no matching Unplug a Kick posts nothing; every Unplug posts
// what is queued.
type plugger interface {
	Plug()
	Unplug()
}

// NewSession logs in over dm and starts the full feature phase. On error dm
// is closed.
func NewSession(ctx context.Context, dm Datamover, cfg SessionConfig) (*Session, error) {
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = 128
	}
	if cfg.QueueDepth > maxQueueDepth {
		cfg.QueueDepth = maxQueueDepth // the task index is 16 bits of the ITT
	}
	if cfg.NOPInterval == 0 {
		cfg.NOPInterval = 5 * time.Second
	}
	if cfg.NOPTimeout <= 0 {
		cfg.NOPTimeout = 5 * time.Second
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.timeouts == nil {
		cfg.timeouts = new(atomic.Uint64)
	}
	if cfg.Want == (Params{}) {
		cfg.Want = DefaultWant()
	}
	res, err := login(ctx, dm, &cfg.LoginConfig)
	if err != nil {
		dm.Close()
		return nil, err
	}
	s := &Session{
		dm: dm, cfg: cfg, params: res.params, tsih: res.tsih,
		log: cfg.Logger.With().Str("portal", dm.RemoteAddr()).Str("transport", dm.Transport()).
			Str("connection", fmt.Sprintf("isid=%x tsih=%d cid=%d", cfg.ISID[:], res.tsih, cfg.CID)).Logger(),
		slots: make(chan struct{}, cfg.QueueDepth), ctlSem: make(chan struct{}, ctlSlots),
		cmdSN: res.cmdSN, expCmdSN: res.expCmdSN, maxCmdSN: res.maxCmdSN, expStatSN: res.expStatSN,
		tt:       newTaskTable(cfg.QueueDepth),
		lastRecv: time.Now(), stop: make(chan struct{}), failed: make(chan struct{}),
		released: make(chan struct{}), timeouts: cfg.timeouts,
	}
	s.watchdog = time.AfterFunc(time.Hour, s.checkDeadlines)
	s.watchdog.Stop()
	if lt(s.maxCmdSN, s.expCmdSN-1) {
		s.maxCmdSN = s.expCmdSN // a nonsense window; wait for the next update
	}
	s.kicker, _ = dm.(kicker)
	s.plugger, _ = dm.(plugger)
	s.reaps, _ = dm.(reapSource)
	s.preparer, _ = dm.(CommandPreparer)
	if ir, ok := dm.(InlineReceiver); ok {
		s.borrowed = true
		ir.ReceiveInline(s.dispatchInline)
	}
	s.wg.Add(1)
	go s.reader()
	if cfg.NOPInterval > 0 {
		s.wg.Add(1)
		go s.keepalive()
	}
	s.log.Debug().Uint16("tsih", s.tsih).Interface("params", s.params).Msg("login complete")
	return s, nil
}

// DefaultWant are the operational values offered by default: large bursts,
// immediate data, as the Linux initiator.
func DefaultWant() Params {
	p := DefaultParams()
	p.InitiatorMaxRecvDataSegmentLength = 262144
	p.MaxBurstLength = 16776192
	p.FirstBurstLength = 262144
	p.InitialR2T = true
	p.ImmediateData = true
	p.MaxOutstandingR2T = 1
	p.InitiatorRecvDataSegmentLength = 8192
	p.TargetRecvDataSegmentLength = 8192
	return p
}

// Params returns the negotiated values.
func (s *Session) Params() Params { return s.params }

// TSIH returns the target-assigned session handle.
func (s *Session) TSIH() uint16 { return s.tsih }

// Transport names the datamover ("tcp" or "iser").
func (s *Session) Transport() string { return s.dm.Transport() }

// Err returns the reason the session ended, or nil while it runs.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.failed }

// lt is serial number arithmetic (RFC 1982, 32 bits): a < b.
func lt(a, b uint32) bool { return a != b && int32(a-b) < 0 }

// CommandTimeouts counts the SCSI commands that timed out on this session
// (on every session of its Nexus, when it has one).
func (s *Session) CommandTimeouts() uint64 { return s.timeouts.Load() }

// maxQueueDepth is the largest QueueDepth: task indices are 16 bits.
const maxQueueDepth = 1<<ittIndexBits - ctlSlots - 1

// fail ends the session with err (the first error wins) and closes the
// datamover. Commands that were never sent (waiting for the window or for
// an entry) end at once with err; the requests in flight are parked: the
// reader releases them once the datamover can no longer place data in
// their buffers (release).
func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	s.dead.Store(true)
	if s.windowCh != nil {
		close(s.windowCh)
		s.windowCh = nil
	}
	close(s.failed)
	var ended []int
	for i := s.tt.peekWindow(); i >= 0; i = s.tt.peekWindow() {
		s.tt.popWindow()
		s.tt.tasks[i].err = err
		s.tt.tasks[i].state = taskDone
		ended = append(ended, i)
	}
	backlog := s.backlog[s.bhead:]
	s.backlog, s.bhead = nil, 0
	s.mu.Unlock()
	if !errors.Is(err, ErrSessionClosed) {
		s.log.Warn().Err(err).Msg("session ended")
	}
	for _, i := range ended {
		s.finish(i)
	}
	for i := range backlog {
		q := &backlog[i]
		q.done.CommandDone(q.cookie, nil, fmt.Errorf("scsi command 0x%02x: %w", q.cdb[0], err))
	}
	if ir, ok := s.dm.(InlineReceiver); ok {
		ir.StartClose() // the reader's release finishes it
		return
	}
	s.dm.Close()
}

// release runs as the reader ends, after fail: it closes the datamover
// (Close is idempotent and returns only once a Close in progress elsewhere
// has completed: socket closed and writer stopped, or queue pair drained
// and memory deregistered), so with the reader gone too nothing places data
// any more; only then are the parked requests told the session ended.
func (s *Session) release() {
	s.dm.Close()
	s.watchdog.Stop()
	s.mu.Lock()
	err := s.err
	var ended []int
	for i := range s.tt.tasks {
		t := &s.tt.tasks[i]
		switch t.state {
		case taskAbandoned:
			s.freeLocked(i)
		case taskSent, taskEH:
			s.tt.unlink(i)
			t.err, t.state = err, taskDone
			ended = append(ended, i)
		}
	}
	s.tt.outstanding = 0
	s.mu.Unlock()
	for _, i := range ended {
		s.finish(i)
	}
	close(s.released)
}

// freeLocked returns an entry and its token. A freed command entry goes to
// the oldest Submit waiting for one: freeLocked returns the entry it then
// has, for the caller to launch once it released the lock, or -1.
func (s *Session) freeLocked(idx int) int {
	s.tt.release(idx)
	if idx >= s.tt.depth {
		<-s.ctlSem
		return -1
	}
	if s.bhead < len(s.backlog) && s.err == nil {
		q := &s.backlog[s.bhead]
		next := s.takeQueuedLocked(q) // the token passes to it
		*q = queuedCmd{}
		if s.bhead++; s.bhead == len(s.backlog) {
			s.backlog, s.bhead = s.backlog[:0], 0 // keeps its capacity
		}
		return next
	}
	<-s.slots
	return -1
}

// allocCtlLocked takes a control entry (its token is held by the caller).
func (s *Session) allocCtlLocked() int {
	idx := s.tt.alloc(false)
	if idx < 0 {
		panic("initiator: control entries exhausted with a token held")
	}
	s.tt.tasks[idx].state = taskSent
	return idx
}

// endLUNTasks ends every SCSI command in flight on lun whose CmdSN is below
// before with err: after a LOGICAL UNIT RESET the target runs none of them
// any more. Commands sent after the reset are new tasks the target runs.
func (s *Session) endLUNTasks(lun [8]byte, before uint32, err error) {
	s.mu.Lock()
	var ended []int
	if s.err == nil {
		for i := 0; i < s.tt.depth; i++ {
			t := &s.tt.tasks[i]
			if (t.state == taskSent || t.state == taskEH) && t.dt.LUN == lun && lt(t.cmdSN, before) {
				s.endLocked(i, nil, err)
				t.dt.ended = true
				ended = append(ended, i)
			}
		}
	}
	s.mu.Unlock()
	for _, i := range ended {
		s.finish(i)
	}
}

// issue assigns an ITT and CmdSN to a control request and hands it to
// send, in CmdSN order. Immediate requests do not wait for the window nor
// advance CmdSN. When MaxCmdSN does not move for a whole command timeout
// while a request waits for the window, the session fails
// (ErrWindowClosed). It returns the request's task index, holding a
// control token, and the CmdSN it carried.
func (s *Session) issue(ctx context.Context, immediate bool,
	send func(itt, cmdSN, expStatSN uint32) error) (int, uint32, error) {
	select {
	case s.ctlSem <- struct{}{}:
	case <-ctx.Done():
		return -1, 0, ctx.Err()
	case <-s.failed:
		return -1, 0, s.Err()
	}
	for {
		s.mu.Lock()
		if s.err != nil {
			err := s.err
			<-s.ctlSem
			s.mu.Unlock()
			return -1, 0, err
		}
		if immediate || !lt(s.maxCmdSN, s.cmdSN) {
			idx := s.allocCtlLocked()
			t := &s.tt.tasks[idx]
			cmdSN := s.cmdSN
			t.cmdSN = cmdSN
			if !immediate {
				s.cmdSN++
			}
			err := send(t.itt, cmdSN, s.expStatSN)
			if err != nil {
				s.freeLocked(idx)
			}
			s.mu.Unlock()
			if err == nil {
				err = s.kick()
			}
			if err != nil {
				s.fail(fmt.Errorf("send: %w", err))
				return -1, 0, err
			}
			return idx, cmdSN, nil
		}
		if s.windowCh == nil {
			s.windowCh = make(chan struct{})
		}
		ch := s.windowCh
		maxCmdSN, next := s.maxCmdSN, s.cmdSN
		s.mu.Unlock()
		if err := s.waitWindow(ctx, ch, maxCmdSN, next); err != nil {
			<-s.ctlSem
			return -1, 0, err
		}
	}
}

// kick posts what a batching datamover queued.
func (s *Session) kick() error {
	if s.kicker != nil {
		return s.kicker.Kick()
	}
	return nil
}

// waitWindow waits for MaxCmdSN to move (ch closed), for at most a command
// timeout; then the session fails, as the target takes no more commands.
func (s *Session) waitWindow(ctx context.Context, ch <-chan struct{}, maxCmdSN, next uint32) error {
	var expire <-chan time.Time
	if s.cfg.CommandTimeout > 0 {
		t := time.NewTimer(s.cfg.CommandTimeout)
		defer t.Stop()
		expire = t.C
	}
	for {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-expire:
		}
		if !s.tasksOutstanding() {
			break
		}
		// Commands are outstanding: their own timeouts and error handling
		// end them, and that moves the window or drops the session.
		t := time.NewTimer(s.cfg.CommandTimeout)
		defer t.Stop()
		expire = t.C
	}
	s.windowClosed(maxCmdSN, next)
	return nil
}

// windowClosed fails the session for a window that stayed closed.
func (s *Session) windowClosed(maxCmdSN, next uint32) {
	s.timeouts.Add(1)
	s.fail(fmt.Errorf("no window update for %v (MaxCmdSN %d, next CmdSN %d): %w",
		s.cfg.CommandTimeout, maxCmdSN, next, ErrWindowClosed))
}

// tasksOutstanding reports whether a SCSI command waits for its status.
func (s *Session) tasksOutstanding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tt.outstanding > 0
}

// wait waits for the answer to the control request at idx and frees its
// entry. When ctx ends first the entry stays reserved (abandoned) until
// the late answer arrives, which is then dropped, or the session ends.
func (s *Session) wait(ctx context.Context, idx int) (*pdu.PDU, error) {
	t := &s.tt.tasks[idx]
	select {
	case <-t.ch:
	case <-ctx.Done():
		s.mu.Lock()
		if t.state == taskSent {
			t.state = taskAbandoned
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		s.mu.Unlock()
		<-t.ch // answered meanwhile
	}
	s.mu.Lock()
	resp, err := t.resp, t.err
	s.freeLocked(idx)
	s.mu.Unlock()
	return resp, err
}

// reader dispatches PDUs until the datamover fails or closes.
func (s *Session) reader() {
	defer s.wg.Done()
	defer s.release()
	for {
		p, err := s.dm.Recv()
		if err != nil {
			s.mu.Lock()
			out, cause := s.loggedOut, s.logoutCause
			s.mu.Unlock()
			if out {
				err = ErrSessionClosed // the target closes after a logout
			}
			if cause != nil {
				err = cause
			}
			s.fail(fmt.Errorf("connection: %w", err))
			return
		}
		if err := s.dispatch(p); err != nil {
			s.fail(err)
			return
		}
	}
}

// dispatchInline is the handler an InlineReceiver calls for each PDU, on
// its completion goroutine: a PDU that breaks the protocol fails the
// session with its own error, as the reader would.
func (s *Session) dispatchInline(p *pdu.PDU) error {
	err := s.dispatch(p)
	if err != nil {
		s.fail(err)
	}
	return err
}

// updateSNs applies a target PDU's StatSN, ExpCmdSN and MaxCmdSN (RFC 7143
// section 4.2.2.1). advance says whether the PDU consumes a StatSN.
func (s *Session) updateSNs(op pdu.Opcode, sn pdu.TargetSNs, advance bool) error {
	s.mu.Lock()
	err := s.updateSNsLocked(op, sn, advance)
	kick := s.kickPending
	var serr error
	if kick {
		serr = s.startedLocked(nil)
	}
	s.mu.Unlock()
	s.posted(kick, serr) // commands the window let through
	return err
}

func (s *Session) updateSNsLocked(op pdu.Opcode, sn pdu.TargetSNs, advance bool) error {
	s.lastRecv = time.Now()
	d := int32(sn.StatSN - s.expStatSN)
	if d > maxStatSNGap || d < -maxStatSNGap {
		return pdu.ProtocolErrorf(op, "StatSN %d out of window (ExpStatSN %d)", sn.StatSN, s.expStatSN)
	}
	if advance && d >= 0 {
		s.expStatSN = sn.StatSN + 1
	}
	if int32(sn.MaxCmdSN-sn.ExpCmdSN) < -1 {
		return nil // MaxCmdSN - ExpCmdSN + 1 < 0: ignore the window update
	}
	if lt(s.expCmdSN, sn.ExpCmdSN) {
		s.expCmdSN = sn.ExpCmdSN
	}
	if lt(s.maxCmdSN, sn.MaxCmdSN) {
		s.maxCmdSN = sn.MaxCmdSN
		if s.windowCh != nil {
			close(s.windowCh)
			s.windowCh = nil
		}
		s.openWindowLocked()
	}
	return nil
}

// complete hands a response to the request with itt. It returns false when
// no request in flight has that ITT, or it is an abandoned control request
// (abandoned reports which).
func (s *Session) complete(itt uint32, resp *pdu.PDU) (ok, abandoned bool) {
	s.mu.Lock()
	idx := s.tt.lookup(itt)
	if idx < 0 || s.err != nil {
		s.mu.Unlock()
		return false, false
	}
	switch t := &s.tt.tasks[idx]; t.state {
	case taskSent, taskEH:
		if s.borrowed && (!t.scsi || t.done == nil) {
			// Its waiter reads it after the handler has returned.
			resp = &pdu.PDU{BHS: resp.BHS, AHS: bytes.Clone(resp.AHS), Data: bytes.Clone(resp.Data)}
		}
		s.endLocked(idx, resp, nil)
	case taskAbandoned:
		s.freeLocked(idx)
		s.mu.Unlock()
		return false, true
	default:
		s.mu.Unlock()
		return false, false
	}
	s.mu.Unlock()
	s.finish(idx)
	return true, false
}

func (s *Session) dispatch(p *pdu.PDU) error {
	op := p.BHS.Opcode()
	switch op {
	case pdu.OpSCSIResponse:
		var r pdu.SCSIResponse
		if err := r.Unmarshal(&p.BHS); err != nil {
			return err
		}
		if err := s.updateSNs(op, r.TargetSNs, true); err != nil {
			return err
		}
		s.completeOrDrop(r.ITT, p)
	case pdu.OpDataIn: // only with status: the datamover consumed the rest
		var d pdu.DataIn
		if err := d.Unmarshal(&p.BHS); err != nil {
			return err
		}
		if !d.HasStatus {
			return pdu.ProtocolErrorf(op, "datamover passed up a Data-In without status")
		}
		if err := s.updateSNs(op, d.TargetSNs, true); err != nil {
			return err
		}
		s.completeOrDrop(d.ITT, p)
	case pdu.OpNOPIn:
		var n pdu.NOPIn
		if err := n.Unmarshal(&p.BHS); err != nil {
			return err
		}
		if err := s.updateSNs(op, n.TargetSNs, n.ITT != pdu.ReservedTag); err != nil {
			return err
		}
		switch {
		case n.TTT != pdu.ReservedTag:
			return s.answerPing(&n, p.Data)
		case n.ITT == pdu.ReservedTag:
			// Neither a ping nor an answer: tgt sends these over iSER.
			s.log.Debug().Msg("NOP-In with ITT and TTT 0xffffffff ignored")
		default:
			s.completeOrDrop(n.ITT, p)
		}
	case pdu.OpTaskMgmtResp, pdu.OpTextResp, pdu.OpLogoutResp:
		if err := s.updateSNs(op, p.BHS.TargetSNs(), true); err != nil {
			return err
		}
		if op == pdu.OpLogoutResp && p.BHS[2] == 0 {
			// The target closes the connection next: that is no failure.
			s.mu.Lock()
			s.loggedOut = true
			s.mu.Unlock()
		}
		if ok, late := s.complete(p.BHS.ITT(), p); !ok {
			if !late {
				return pdu.ProtocolErrorf(op, "response for unknown ITT 0x%x", p.BHS.ITT())
			}
			s.log.Debug().Uint32("itt", p.BHS.ITT()).Str("op", op.String()).Msg("late response to an abandoned request dropped")
		}
	case pdu.OpReject:
		return s.handleReject(p)
	case pdu.OpAsyncMessage:
		return s.handleAsync(p)
	default:
		return pdu.ProtocolErrorf(op, "unexpected in full feature phase")
	}
	return nil
}

// completeOrDrop completes a task; a response for an unknown ITT belongs to a
// task that was aborted and is dropped.
func (s *Session) completeOrDrop(itt uint32, p *pdu.PDU) {
	if ok, _ := s.complete(itt, p); !ok {
		s.log.Debug().Uint32("itt", itt).Str("op", p.BHS.Opcode().String()).Msg("response for a finished task dropped")
	}
}

// answerPing answers a target's NOP-In ping (TTT valid) with a NOP-Out.
func (s *Session) answerPing(n *pdu.NOPIn, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := pdu.NOPOut{Immediate: true, LUN: n.LUN, ITT: pdu.ReservedTag, TTT: n.TTT,
		CmdSN: s.cmdSN, ExpStatSN: s.expStatSN}
	if err := s.dm.SendPDU(pdu.NewPDU(&out, data)); err != nil {
		return fmt.Errorf("answer NOP-In: %w", err)
	}
	return nil
}

// RejectError is a Reject PDU aimed at one of our requests.
type RejectError struct {
	Reason uint8
	Op     pdu.Opcode // the rejected PDU's opcode
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("target rejected %s: %s", e.Op, rejectReason(e.Reason))
}

func (s *Session) handleReject(p *pdu.PDU) error {
	var r pdu.Reject
	if err := r.Unmarshal(&p.BHS); err != nil {
		return err
	}
	if err := s.updateSNs(pdu.OpReject, r.TargetSNs, true); err != nil {
		return err
	}
	if len(p.Data) < pdu.BHSLen {
		return pdu.ProtocolErrorf(pdu.OpReject, "data segment of %d bytes lacks the rejected header", len(p.Data))
	}
	var rb pdu.BHS
	copy(rb[:], p.Data[:pdu.BHSLen])
	rej := &RejectError{Reason: r.Reason, Op: rb.Opcode()}
	s.log.Warn().Str("rejected", rej.Op.String()).Str("reason", rejectReason(r.Reason)).Msg("target sent Reject")
	s.mu.Lock()
	idx := s.tt.lookup(rb.ITT())
	if idx >= 0 && s.err == nil {
		switch s.tt.tasks[idx].state {
		case taskSent, taskEH:
			s.endLocked(idx, nil, rej)
			s.mu.Unlock()
			s.finish(idx)
			return nil
		case taskAbandoned:
			s.freeLocked(idx)
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	if r.Reason == 0x04 || r.Reason == 0x09 {
		// A protocol error we cannot pin on a request: the connection is unusable.
		return fmt.Errorf("target: %w", rej)
	}
	return nil
}

func (s *Session) handleAsync(p *pdu.PDU) error {
	var a pdu.AsyncMessage
	if err := a.Unmarshal(&p.BHS); err != nil {
		return err
	}
	if err := s.updateSNs(pdu.OpAsyncMessage, a.TargetSNs, true); err != nil {
		return err
	}
	switch a.AsyncEvent {
	case pdu.AsyncSCSIEvent:
		s.log.Warn().Hex("sense", p.Data).Msg("target reported a SCSI asynchronous event")
	case pdu.AsyncLogoutRequest:
		s.log.Warn().Uint16("time2wait", a.Parameter3).Msg("target requests logout")
		s.mu.Lock()
		s.logoutCause = fmt.Errorf("session: %w", ErrTargetLogout)
		s.mu.Unlock()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Logout(ctx)
			s.fail(fmt.Errorf("session: %w", ErrTargetLogout))
		}()
	case pdu.AsyncDropConnection, pdu.AsyncDropAllConnections:
		return fmt.Errorf("session: target dropped the connection (async event %d): %w", a.AsyncEvent, ErrTargetLogout)
	case pdu.AsyncRenegotiate:
		s.log.Info().Msg("target asks for renegotiation; keeping the current values")
	default:
		s.log.Debug().Uint8("event", a.AsyncEvent).Msg("async message ignored")
	}
	return nil
}

// keepalive pings the target with NOP-Out when the connection has been idle
// for NOPInterval and fails the session when no NOP-In comes back. It looks
// four times per interval, so a silent connection is pinged at most a
// quarter interval late (a tick per interval could find it idle a moment
// short of the interval and ping a whole interval later).
func (s *Session) keepalive() {
	defer s.wg.Done()
	tick := time.NewTicker(max(s.cfg.NOPInterval/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.failed:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		idle := time.Since(s.lastRecv)
		s.mu.Unlock()
		if idle < s.cfg.NOPInterval {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.NOPTimeout)
		err := s.Ping(ctx)
		cancel()
		if err != nil && s.Err() == nil {
			s.fail(fmt.Errorf("keepalive: no NOP-In within %s: %w", s.cfg.NOPTimeout, err))
			return
		}
	}
}

// Ping sends a NOP-Out and waits for the target's NOP-In.
func (s *Session) Ping(ctx context.Context) error {
	idx, _, err := s.issue(ctx, true, func(itt, cmdSN, expStatSN uint32) error {
		n := pdu.NOPOut{Immediate: true, ITT: itt, TTT: pdu.ReservedTag, CmdSN: cmdSN, ExpStatSN: expStatSN}
		return s.dm.SendPDU(pdu.NewPDU(&n, nil))
	})
	if err != nil {
		return fmt.Errorf("nop-out: %w", err)
	}
	if _, err := s.wait(ctx, idx); err != nil {
		return fmt.Errorf("nop-out: %w", err)
	}
	return nil
}

// TaskManagement sends a task management function request and returns an
// error unless the target answers "function complete".
func (s *Session) TaskManagement(ctx context.Context, fn uint8, lun [8]byte, refITT, refCmdSN uint32) error {
	_, err := s.taskManagement(ctx, fn, lun, refITT, refCmdSN)
	return err
}

func (s *Session) taskManagement(ctx context.Context, fn uint8, lun [8]byte, refITT, refCmdSN uint32) (uint32, error) {
	idx, sent, err := s.issue(ctx, true, func(itt, cmdSN, expStatSN uint32) error {
		t := pdu.TaskMgmtRequest{Immediate: true, Function: fn, LUN: lun, ITT: itt, RTT: refITT,
			CmdSN: cmdSN, ExpStatSN: expStatSN, RefCmdSN: refCmdSN}
		if fn != pdu.TMFAbortTask {
			t.RTT = pdu.ReservedTag
		}
		return s.dm.SendPDU(pdu.NewPDU(&t, nil))
	})
	if err != nil {
		return sent, fmt.Errorf("task management %d: %w", fn, err)
	}
	resp, err := s.wait(ctx, idx)
	if err != nil {
		return sent, fmt.Errorf("task management %d: %w", fn, err)
	}
	var r pdu.TaskMgmtResponse
	if err := r.Unmarshal(&resp.BHS); err != nil {
		return sent, err
	}
	if r.Response != 0 {
		name, ok := pdu.TMFResponseName(r.Response)
		if !ok {
			name = fmt.Sprintf("response %d", r.Response)
		}
		return sent, fmt.Errorf("task management %d: %s", fn, name)
	}
	return sent, nil
}

// Logout closes the session with a Logout Request (reason "close the session").
func (s *Session) Logout(ctx context.Context) error {
	idx, _, err := s.issue(ctx, false, func(itt, cmdSN, expStatSN uint32) error {
		l := pdu.LogoutRequest{Reason: pdu.LogoutCloseSession, ITT: itt, CID: s.cfg.CID, CmdSN: cmdSN, ExpStatSN: expStatSN}
		return s.dm.SendPDU(pdu.NewPDU(&l, nil))
	})
	if err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	resp, err := s.wait(ctx, idx)
	if err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	var r pdu.LogoutResponse
	if err := r.Unmarshal(&resp.BHS); err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	if r.Response != 0 {
		return fmt.Errorf("logout: target answered response %d", r.Response)
	}
	s.mu.Lock()
	s.loggedOut = true
	s.mu.Unlock()
	return nil
}

// Close logs out (when the session still runs) and tears the connection
// down. It is idempotent and safe to call concurrently.
func (s *Session) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.Err() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if lerr := s.Logout(ctx); lerr != nil && s.Err() == nil {
				err = lerr
			}
			cancel()
		}
		s.fail(ErrSessionClosed)
		close(s.stop)
		s.wg.Wait()
	})
	return err
}

// TargetName is the IQN the session logged in to.
func (s *Session) TargetName() string { return s.cfg.TargetName }

// RemoteAddr is the portal address of the connection.
func (s *Session) RemoteAddr() string { return s.dm.RemoteAddr() }

// A Session is no blockdev.BufferProvider: it has no buffers of its own
// that would outlive its connection. Zero-copy buffers come from a Nexus,
// which registers them with every connection it makes.
