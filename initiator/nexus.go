package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/internal/freelist"
	"github.com/rs/zerolog"
)

// NexusConfig configures a Nexus: where it logs in, how, and how long I/O
// waits for a lost session to come back.
type NexusConfig struct {
	// Portals are tried in order at the first login and in turn during
	// recovery (host:port each).
	Portals []string
	// PortalGroupTags, when not nil, holds for each portal the
	// TargetPortalGroupTag its login must answer with (RFC 7143 13.9), or -1
	// for any: a login that answers another tag is logged out and fails
	// with a *PortalGroupTagError (the portal given as ip:port,tpgt leads
	// elsewhere than the admin meant).
	PortalGroupTags []int
	// Dial is the datamover configuration; its Addr is set per portal.
	Dial DialConfig
	// Session configures every session; its ISID stays the same so each new
	// login (TSIH 0) reinstates the session before it (RFC 7143 6.3.5).
	Session SessionConfig
	// ReplacementTimeout is how long I/O waits for recovery before it
	// fails with EIO (open-iscsi's replacement_timeout); recovery goes on
	// after that and I/O works again once it succeeds. 0 fails I/O at once
	// while the session is down; negative means the default, 120 s.
	ReplacementTimeout time.Duration
	// LoginTimeout bounds each login attempt (default 15 s).
	LoginTimeout time.Duration
	// RecoveryConnectTimeout, when positive and shorter than LoginTimeout,
	// bounds the connection of each recovery attempt (DialConfig's
	// ConnectTimeout): a multipath path whose portal comes back should not
	// wait out a connection request sent into the silence before it. The
	// login exchange on an established connection keeps LoginTimeout: LIO
	// admits one login at a time per portal and holds a login the
	// initiator gave up until its own 15 s login timer, so logins given up
	// every 5 s kept a portal busy for good (84-multipath, silent path).
	RecoveryConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the pause between reconnect attempts
	// (defaults 250 ms and 2 s); it doubles after every failed attempt.
	MinBackoff, MaxBackoff time.Duration
	Logger                 zerolog.Logger

	// connect replaces Connect in tests.
	connect func(ctx context.Context, dc DialConfig, sc SessionConfig) (*Session, error)
}

// DefaultReplacementTimeout is open-iscsi's default replacement_timeout.
const DefaultReplacementTimeout = 120 * time.Second

// maxReissue bounds how often one command is reissued after connection
// failures before its error is returned.
const maxReissue = 16

// maxTimeoutRetries bounds how often one command is issued again after it
// timed out (aborted, or its session dropped) or found the CmdSN window
// closed too long; one more such failure ends it with EIO.
const maxTimeoutRetries = 2

// ErrReplacementTimeout is wrapped by the error of I/O that found the
// session down for longer than the replacement timeout. It maps to EIO.
var ErrReplacementTimeout = errors.New("session down longer than the replacement timeout")

// NexusState is where a Nexus is in its life.
type NexusState int

const (
	// NexusUp: a session is logged in and carries I/O.
	NexusUp NexusState = iota
	// NexusRecovering: the session was lost; I/O waits while the Nexus
	// logs in again.
	NexusRecovering
	// NexusFailed: recovery has taken longer than the replacement timeout;
	// I/O fails with EIO while recovery goes on.
	NexusFailed
	// NexusClosed: Close was called.
	NexusClosed
)

func (s NexusState) String() string {
	switch s {
	case NexusUp:
		return "up"
	case NexusRecovering:
		return "recovering"
	case NexusFailed:
		return "failed"
	case NexusClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// NexusStatus is a snapshot of a Nexus for status reports.
type NexusStatus struct {
	State      NexusState
	Portal     string // the current (or last) session's portal
	Transport  string
	Recoveries uint64    // sessions reinstated after a failure
	Faults     uint64    // sessions lost
	DownSince  time.Time // zero while up
	LastError  error     // why the last session ended
	// CommandTimeouts counts SCSI commands that got no status within the
	// command timeout, and waits for a CmdSN window that stayed closed.
	CommandTimeouts uint64
}

// Nexus is an I_T nexus that outlives its sessions: when the session fails
// (connection loss, keepalive timeout, the target logging out) it logs in
// again with the same ISID, which reinstates the session at the target and
// ends the old one's tasks there, and reissues the commands that were in
// flight on the new session. New commands wait while it recovers, for up to
// the replacement timeout. It is safe for concurrent use.
//
// Goroutines: Dial starts a monitor that waits for the current session to
// end and runs recovery. Close stops it (cancelling a login in progress),
// logs out of the current session, releases every waiter with
// ErrSessionClosed and finally unmaps the I/O buffers.
type Nexus struct {
	cfg NexusConfig
	log zerolog.Logger

	mu         sync.Mutex
	s          *Session                // current; stays set (failed) while recovering
	up         atomic.Pointer[Session] // s while the state is up, else nil
	portal     int                     // index of s's portal
	state      NexusState
	ready      chan struct{} // closed when recovery ends (up, failed or closed)
	downSince  time.Time
	lastErr    error
	recoveries uint64
	faults     uint64
	timeouts   atomic.Uint64 // shared by every session: SessionConfig.timeouts
	reinstated []func()      // OnReinstated hooks

	ioMu  sync.Mutex // held while registering ioMem with a session
	ioMem [][]byte   // from IOBuffers, registered with every session

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	cmds freelist.List[nexusCmd] // for Submit
}

// DialNexus logs in through the first portal that answers and starts the
// monitor. The first login is not retried beyond the portal list: a
// configuration error shows at once.
func DialNexus(ctx context.Context, cfg NexusConfig) (*Nexus, error) {
	if len(cfg.Portals) == 0 {
		return nil, errors.New("nexus: no portal")
	}
	if cfg.ReplacementTimeout < 0 {
		cfg.ReplacementTimeout = DefaultReplacementTimeout
	}
	if cfg.LoginTimeout <= 0 {
		cfg.LoginTimeout = 15 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(cfg.MinBackoff, 2*time.Second)
	}
	if cfg.connect == nil {
		cfg.connect = Connect
	}
	if cfg.Session.ISID == (pdu.ISID{}) {
		cfg.Session.ISID = NewISID()
	}
	cfg.Session.TSIH = 0
	n := &Nexus{cfg: cfg, log: cfg.Logger, ready: make(chan struct{}), closed: make(chan struct{})}
	n.cfg.Session.timeouts = &n.timeouts
	var errs []error
	for i := range cfg.Portals {
		s, err := n.login(ctx, i, 0, n.cfg.LoginTimeout)
		if err == nil {
			n.s, n.portal = s, i
			n.up.Store(s)
			n.wg.Add(1)
			go n.monitor()
			return n, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
		if i+1 < len(cfg.Portals) {
			n.log.Warn().Err(err).Str("portal", cfg.Portals[i]).Str("next", cfg.Portals[i+1]).Msg("portal skipped")
		}
	}
	return nil, portalErrors(errs)
}

// portalErrors is a DialNexus that failed: the error of each portal tried,
// in order. Its message is errors.Join's, one line each.
type portalErrors []error

func (e portalErrors) Error() string   { return errors.Join(e...).Error() }
func (e portalErrors) Unwrap() []error { return e }

// login runs one login attempt through portal i: its connection within
// connect (0: no bound of its own), the whole attempt within connect plus
// timeout.
func (n *Nexus) login(ctx context.Context, i int, connect, timeout time.Duration) (*Session, error) {
	ctx, cancel := LoginContext(ctx, connect+timeout)
	defer cancel()
	dc := n.cfg.Dial
	dc.Addr = n.cfg.Portals[i]
	if connect > 0 {
		dc.ConnectTimeout = connect
	}
	s, err := n.cfg.connect(ctx, dc, n.cfg.Session)
	if err != nil {
		return nil, err
	}
	if i < len(n.cfg.PortalGroupTags) && n.cfg.PortalGroupTags[i] >= 0 {
		if got := int(s.Params().TargetPortalGroupTag); got != n.cfg.PortalGroupTags[i] {
			_ = s.Close()
			return nil, &PortalGroupTagError{Portal: dc.Addr, Target: n.cfg.Session.TargetName,
				Want: n.cfg.PortalGroupTags[i], Got: got}
		}
	}
	n.ioMu.Lock()
	err = registerIOMem(s, n.ioMem)
	n.ioMu.Unlock()
	if err != nil {
		s.fail(err)
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// PortalGroupTagError is a login whose target answered another
// TargetPortalGroupTag than the one given with the portal (ip:port,tpgt).
type PortalGroupTagError struct {
	Portal, Target string
	Want, Got      int
}

func (e *PortalGroupTagError) Error() string {
	return fmt.Sprintf("login to %s at %s: the target answered portal group tag %d, the portal was given with tag %d (%s,%d)",
		e.Target, e.Portal, e.Got, e.Want, e.Portal, e.Want)
}

// registerIOMem registers the I/O buffers with s's datamover when it moves
// data by RDMA.
func registerIOMem(s *Session, mem [][]byte) error {
	r, ok := s.dm.(ioBufferRegistrar)
	if !ok {
		return nil
	}
	for _, m := range mem {
		if err := r.RegisterIOBuffers(m); err != nil {
			return err
		}
	}
	return nil
}

// recoveryConnectTimeout bounds the connection of a recovery attempt (0:
// the login timeout bounds connection and login together).
func (n *Nexus) recoveryConnectTimeout() time.Duration {
	if t := n.cfg.RecoveryConnectTimeout; t > 0 && t < n.cfg.LoginTimeout {
		return t
	}
	return 0
}

// OnReinstated registers f, called by the monitor after every session
// reinstatement (a LUN re-reads its mode pages: the target may have been
// reconfigured meanwhile). f must not block.
func (n *Nexus) OnReinstated(f func()) {
	n.mu.Lock()
	n.reinstated = append(n.reinstated, f)
	n.mu.Unlock()
}

// ioBufferRegistrar is a datamover that registers a Nexus's I/O buffers.
type ioBufferRegistrar interface {
	RegisterIOBuffers(mem []byte) error
}

// Session returns the current session (possibly failed, while recovering).
func (n *Nexus) Session() *Session {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.s
}

// Status returns a snapshot for status reports.
func (n *Nexus) Status() NexusStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := NexusStatus{State: n.state, Recoveries: n.recoveries, Faults: n.faults,
		DownSince: n.downSince, LastError: n.lastErr, Portal: n.cfg.Portals[n.portal],
		CommandTimeouts: n.timeouts.Load()}
	if n.s != nil {
		st.Transport = n.s.Transport()
	}
	return st
}

// TargetName is the IQN the nexus logs in to.
func (n *Nexus) TargetName() string { return n.cfg.Session.TargetName }

// InitiatorName is the initiator name the nexus logs in with.
func (n *Nexus) InitiatorName() string { return n.cfg.Session.InitiatorName }

// ISID is the initiator session ID every session of the nexus uses.
func (n *Nexus) ISID() pdu.ISID { return n.cfg.Session.ISID }

// markDownLocked moves the nexus from up to recovering when s, its current
// session, has ended. It is idempotent.
func (n *Nexus) markDownLocked(s *Session) {
	if n.s != s || n.state != NexusUp {
		return
	}
	n.state = NexusRecovering
	n.up.Store(nil)
	n.ready = make(chan struct{})
	n.downSince = time.Now()
	n.lastErr = s.Err()
	n.faults++
	if n.cfg.ReplacementTimeout == 0 {
		n.state = NexusFailed
		close(n.ready)
	}
}

// session returns the session to issue on, waiting while recovery runs.
func (n *Nexus) session(ctx context.Context) (*Session, error) {
	if s := n.up.Load(); s != nil && !s.dead.Load() {
		return s, nil
	}
	for {
		n.mu.Lock()
		switch n.state {
		case NexusClosed:
			n.mu.Unlock()
			return nil, ErrSessionClosed
		case NexusFailed:
			err := n.lastErr
			n.mu.Unlock()
			return nil, &ioError{fmt.Errorf("%w (%v): %w", ErrReplacementTimeout, n.cfg.ReplacementTimeout, err), syscall.EIO}
		case NexusUp:
			s := n.s
			if s.Err() == nil {
				n.mu.Unlock()
				return s, nil
			}
			n.markDownLocked(s)
		}
		ready := n.ready
		n.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-n.closed:
		}
	}
}

// Do runs a SCSI command like Session.Do. When the session fails before the
// command completes, the command is issued again on the next session; while
// there is none it waits, up to the replacement timeout. A command that a
// task management function ended (ErrTaskAborted: after its own timeout, or
// a LOGICAL UNIT RESET for another command) is issued again too, as the
// target no longer runs it. A command that times out (or finds the CmdSN
// window closed) more than maxTimeoutRetries times fails with EIO.
func (n *Nexus) Do(ctx context.Context, c *Command) (*Result, error) {
	timeouts := 0
	for attempt := 0; ; attempt++ {
		s, err := n.session(ctx)
		if err != nil {
			return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
		}
		r, err := s.Do(ctx, c)
		if err == nil || ctx.Err() != nil {
			return r, err
		}
		again, err := n.reissue(s, err, &timeouts, attempt)
		if !again {
			return nil, err
		}
		n.log.Debug().Err(err).Uint8("op", c.CDB[0]).Msg("command reissued")
	}
}

// reissue decides whether a command that failed with err on s is issued
// again (on s, or on the next session): when s failed, or a task
// management function ended the command, within the reissue and timeout
// bounds. It returns the error to report otherwise.
func (n *Nexus) reissue(s *Session, err error, timeouts *int, attempt int) (bool, error) {
	aborted := errors.Is(err, ErrTaskAborted)
	if s.Err() == nil && !aborted {
		return false, err
	}
	if s.Err() != nil {
		n.mu.Lock()
		n.markDownLocked(s)
		n.mu.Unlock()
	}
	if errors.Is(err, ErrCommandTimeout) || errors.Is(err, ErrWindowClosed) {
		if *timeouts++; *timeouts > maxTimeoutRetries {
			return false, &ioError{fmt.Errorf("%w (issued %d times)", err, *timeouts), syscall.EIO}
		}
	}
	if attempt >= maxReissue {
		return false, err
	}
	return true, err
}

// monitor waits for the current session to end and recovers it, until Close.
func (n *Nexus) monitor() {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		s := n.s
		n.mu.Unlock()
		select {
		case <-s.Done():
		case <-n.closed:
			return
		}
		n.mu.Lock()
		n.markDownLocked(s)
		n.mu.Unlock()
		if !n.recover(s) {
			return
		}
	}
}

// recover replaces the failed session s. It returns false when the nexus
// was closed first.
func (n *Nexus) recover(s *Session) bool {
	n.mu.Lock()
	cause, since, ready := n.lastErr, n.downSince, n.ready
	n.mu.Unlock()
	n.log.Warn().Err(cause).Str("portal", s.RemoteAddr()).Str("transport", s.Transport()).
		Dur("replacement_timeout", n.cfg.ReplacementTimeout).Msg("session lost: recovering")
	// The old connection must be gone (no late RDMA into reissued buffers)
	// before a new session exists.
	_ = s.Close()

	var timer *time.Timer
	if n.cfg.ReplacementTimeout > 0 {
		timer = time.AfterFunc(n.cfg.ReplacementTimeout-time.Since(since), func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.state == NexusRecovering && n.ready == ready {
				n.state = NexusFailed
				close(n.ready)
				n.log.Error().Err(cause).Dur("replacement_timeout", n.cfg.ReplacementTimeout).
					Msg("replacement timeout: failing I/O with EIO while recovery goes on")
			}
		})
		defer timer.Stop()
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := n.cfg.MinBackoff
	portal := n.portal
	for attempt := 1; ; attempt++ {
		ns, err := n.login(ctx, portal, n.recoveryConnectTimeout(), n.cfg.LoginTimeout)
		if err == nil {
			n.mu.Lock()
			if n.state == NexusClosed {
				n.mu.Unlock()
				_ = ns.Close()
				return false
			}
			n.s, n.portal = ns, portal
			if n.state == NexusRecovering {
				close(n.ready)
			}
			n.state = NexusUp
			n.up.Store(ns)
			n.recoveries++
			n.downSince = time.Time{}
			n.mu.Unlock()
			n.log.Warn().Str("portal", ns.RemoteAddr()).Str("transport", ns.Transport()).Int("attempts", attempt).
				Dur("down", time.Since(since).Round(time.Millisecond)).Uint16("tsih", ns.TSIH()).Msg("session reinstated")
			n.mu.Lock()
			hooks := n.reinstated
			n.mu.Unlock()
			for _, f := range hooks {
				f()
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		n.log.Warn().Err(err).Str("portal", n.cfg.Portals[portal]).Int("attempt", attempt).
			Dur("retry_in", backoff).Msg("reconnect failed")
		select {
		case <-time.After(backoff):
		case <-n.closed:
			return false
		}
		backoff = min(2*backoff, n.cfg.MaxBackoff)
		portal = (portal + 1) % len(n.cfg.Portals)
	}
}

// IOBuffers returns count buffers of size bytes that every session of the
// nexus moves without a copy (iSER), or nil when the transport has no use
// for them (TCP). They stay valid until Close returns; the frontend using
// them must be gone by then.
func (n *Nexus) IOBuffers(count, size int) ([][]byte, error) {
	n.ioMu.Lock()
	defer n.ioMu.Unlock()
	s := n.Session()
	if _, ok := s.dm.(ioBufferRegistrar); !ok {
		return nil, nil
	}
	if count <= 0 || size <= 0 || size > MaxTransfer {
		return nil, fmt.Errorf("nexus: %d I/O buffers of %d bytes", count, size)
	}
	size = (size + 4095) &^ 4095
	mem, err := mapIOMem(count * size)
	if err != nil {
		return nil, err
	}
	if err := registerIOMem(s, [][]byte{mem}); err != nil {
		unmapIOMem(mem)
		return nil, err
	}
	n.ioMem = append(n.ioMem, mem)
	bufs := make([][]byte, count)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs, nil
}

// Close logs out of the current session and stops recovery. It is
// idempotent; I/O waiting for recovery fails with ErrSessionClosed.
func (n *Nexus) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.mu.Lock()
		if n.state == NexusRecovering {
			close(n.ready)
		}
		n.state = NexusClosed
		n.up.Store(nil)
		n.mu.Unlock()
		close(n.closed)
		n.wg.Wait() // the monitor may have installed a new session meanwhile
		err = n.Session().Close()
		n.ioMu.Lock()
		mem := n.ioMem
		n.ioMem = nil
		n.ioMu.Unlock()
		for _, m := range mem {
			unmapIOMem(m)
		}
	})
	return err
}
