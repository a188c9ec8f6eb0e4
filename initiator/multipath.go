package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iser-attach/iser-attach/initiator/scsi"
	"github.com/iser-attach/iser-attach/internal/freelist"
	"github.com/rs/zerolog"
)

// This file holds Multipath: one logical unit reached through several
// portals, each a path with its own Nexus (its own ISID and connection).
// I/O goes to the paths ALUA calls active/optimized (round-robin, or the
// one with the fewest commands in flight: PathSelector), to
// active/non-optimized ones only while no optimized path is usable, and a
// command whose path fails is issued again on another path (see
// multipath_submit.go; the stale-write rule is in multipath_fence.go).

// MultipathConfig configures a Multipath.
type MultipathConfig struct {
	// Paths holds one Nexus configuration per path, each with one portal
	// and its own ISID (a zero ISID gets a random one). Their
	// ReplacementTimeout is replaced by 0: a path whose session is lost
	// fails its commands at once to the Multipath, which issues them on
	// another path, while the path's Nexus logs in again in the
	// background.
	Paths []NexusConfig
	// NoPathTimeout is how long I/O waits while no path is usable before
	// it fails with EIO (dm-multipath's no_path_retry). 0 fails it at
	// once; negative means DefaultReplacementTimeout.
	NoPathTimeout time.Duration
	// RetryDown is the pause between login attempts of a path that was
	// down at the start (default 2 s).
	RetryDown time.Duration
	// ProbeInterval is how often the ALUA state of a path that carries no
	// I/O for it (standby, unavailable, transitioning) is read again, so
	// that it takes I/O again when its group becomes active even without
	// a UNIT ATTENTION (default 2 s).
	ProbeInterval time.Duration
	// Selector chooses among the usable paths of the best ALUA class:
	// round-robin (the zero value) or queue-length.
	Selector PathSelector
	Logger   zerolog.Logger
}

// PathSelector is how a Multipath chooses among its usable paths.
type PathSelector int

// Path selectors.
const (
	// SelectRoundRobin takes the usable paths in turn.
	SelectRoundRobin PathSelector = iota
	// SelectQueueLength takes the usable path with the fewest commands
	// in flight (dm-multipath's queue-length); ties go in turn.
	SelectQueueLength
)

func (s PathSelector) String() string {
	switch s {
	case SelectRoundRobin:
		return "round-robin"
	case SelectQueueLength:
		return "queue-length"
	}
	return fmt.Sprintf("path selector(%d)", int(s))
}

// ParsePathSelector reads a selector's name: round-robin or queue-length.
func ParsePathSelector(s string) (PathSelector, error) {
	switch s {
	case "round-robin":
		return SelectRoundRobin, nil
	case "queue-length":
		return SelectQueueLength, nil
	}
	return 0, fmt.Errorf("path selector %q: want round-robin or queue-length", s)
}

// ErrNoPath is wrapped by the error of I/O that found no usable path for
// longer than the no-path timeout. It maps to EIO.
var ErrNoPath = errors.New("no usable path")

// PathState is what a path can do, for status reports.
type PathState int32

// Path states.
const (
	PathDown          PathState = iota // no session (logging in again)
	PathUp                             // carries I/O (ALUA active, or no ALUA)
	PathStandby                        // ALUA standby
	PathUnavailable                    // ALUA unavailable or offline
	PathTransitioning                  // ALUA transitioning
	PathRefused                        // leads to another logical unit; closed
	PathChecking                       // logged in, identity and ALUA not read yet
)

func (s PathState) String() string {
	switch s {
	case PathDown:
		return "down"
	case PathUp:
		return "up"
	case PathStandby:
		return "standby"
	case PathUnavailable:
		return "unavailable"
	case PathTransitioning:
		return "transitioning"
	case PathRefused:
		return "refused"
	case PathChecking:
		return "checking"
	}
	return fmt.Sprintf("path state(%d)", int(s))
}

// PathStatus is a snapshot of one path.
type PathStatus struct {
	Portal    string
	State     PathState
	ALUA      string // the group's asymmetric access state, "" without ALUA
	Group     int    // target port group, -1 unknown
	Preferred bool   // the group is the target's preferred one
	IOs       uint64 // commands issued on the path
	InFlight  int64
	Failovers uint64 // commands moved from this path to another
	LastError string
	Nexus     NexusStatus // recovering, and nothing else, while the path never logged in
}

// accessUnknown is a path's ALUA state before it is read, or without ALUA:
// it is treated as active/optimized.
const accessUnknown = 0xff

// mpath is one path of a Multipath.
type mpath struct {
	m      *Multipath
	idx    int
	portal string
	cfg    NexusConfig
	log    zerolog.Logger

	nx      atomic.Pointer[Nexus] // nil until its first login
	checked atomic.Pointer[Session]
	access  atomic.Uint32 // scsi.AccessState, or accessUnknown
	refused atomic.Bool

	ios, failovers atomic.Uint64
	inflight       atomic.Int64
	picked         atomic.Uint64 // the turn queue-length last picked it in

	mu        sync.Mutex
	group     int // target port group, -1 unknown
	rtp       int // relative target port, -1 unknown
	preferred bool
	lastErr   string
	wasDown   bool // the down state was logged
}

// Multipath is one logical unit through several paths. It implements
// Executor and Submitter, so a LUN runs on it as on a Nexus. It is safe
// for concurrent use.
type Multipath struct {
	cfg   MultipathConfig
	log   zerolog.Logger
	paths []*mpath
	rr    atomic.Uint64 // round-robin cursor; queue-length's turn

	bound atomic.Bool // bindLUN ran: paths are checked before use
	lun   [8]byte     // set by bindLUN

	mu          sync.Mutex
	identity    string // the first path's LU name (VPD 0x83)
	identitySet bool
	hasALUA     bool
	changed     chan struct{} // closed and replaced when a path changes
	reinstated  []func()

	fence        fenceState
	refreshing   atomic.Bool // a refresh goroutine runs
	refreshAgain atomic.Bool // a refresh was asked for meanwhile
	resets       atomic.Uint64
	noPathSince  atomic.Int64  // UnixNano when I/O last found no usable path, 0 since one was
	prKey        atomic.Uint64 // the persistent reservation key each path registers; 0 none

	closed    chan struct{}
	base      context.Context // cancelled by Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup

	cmds    freelist.List[mpCmd]
	batches freelist.List[mpBatch]
	reaper  atomic.Pointer[mpReaper] // the set a loop took last, until Release
	// pathGen counts path changes (pathsChanged): a set whose build saw
	// it move may miss the path that changed, and ends at its first Reap.
	pathGen atomic.Uint64
	// scanHook, when set (tests), runs as Reaper starts its scan.
	scanHook func()
}

// DialMultipath logs in through every path. It fails only when no path
// logs in; a path that does not is logged and tried again in the
// background until Close.
func DialMultipath(ctx context.Context, cfg MultipathConfig) (*Multipath, error) {
	if len(cfg.Paths) == 0 {
		return nil, errors.New("multipath: no path")
	}
	if cfg.NoPathTimeout < 0 {
		cfg.NoPathTimeout = DefaultReplacementTimeout
	}
	if cfg.RetryDown <= 0 {
		cfg.RetryDown = 2 * time.Second
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 2 * time.Second
	}
	m := &Multipath{cfg: cfg, log: cfg.Logger, changed: make(chan struct{}), closed: make(chan struct{})}
	m.base, m.cancel = context.WithCancel(context.Background())
	for i, pc := range cfg.Paths {
		if len(pc.Portals) != 1 {
			return nil, fmt.Errorf("multipath: path %d has %d portals, not 1", i, len(pc.Portals))
		}
		pc.ReplacementTimeout = 0
		if pc.Session.ISID == (NexusConfig{}).Session.ISID {
			pc.Session.ISID = NewISID()
		}
		p := &mpath{m: m, idx: i, portal: pc.Portals[0], cfg: pc, group: -1, rtp: -1,
			log: cfg.Logger.With().Str("portal", pc.Portals[0]).Logger()}
		p.access.Store(accessUnknown)
		m.paths = append(m.paths, p)
	}
	type result struct {
		nx  *Nexus
		err error
	}
	res := make([]result, len(m.paths))
	var wg sync.WaitGroup
	for i, p := range m.paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i].nx, res[i].err = DialNexus(ctx, p.cfg)
		}()
	}
	wg.Wait()
	var errs []error
	for i, p := range m.paths {
		if res[i].err == nil {
			p.install(res[i].nx)
			continue
		}
		errs = append(errs, res[i].err)
		p.setErr(res[i].err)
	}
	if len(errs) == len(m.paths) {
		m.cancel()
		return nil, portalErrors(errs)
	}
	for i, p := range m.paths {
		if res[i].err != nil {
			p.log.Warn().Err(res[i].err).Msg("path down at login: retrying in the background")
			m.wg.Add(1)
			go p.dialLater()
		}
	}
	return m, nil
}

// install makes nx the path's Nexus.
func (p *mpath) install(nx *Nexus) {
	nx.OnReinstated(p.reinstated)
	p.nx.Store(nx)
	p.m.pathsChanged() // a loop's next set of reapers includes it
	p.log.Info().Str("transport", nx.Status().Transport).Msg("path logged in")
}

// dialLater logs the path in until it succeeds or the Multipath closes.
func (p *mpath) dialLater() {
	defer p.m.wg.Done()
	for {
		select {
		case <-time.After(p.m.cfg.RetryDown):
		case <-p.m.closed:
			return
		}
		nx, err := DialNexus(p.m.base, p.cfg)
		if err != nil {
			p.setErr(err)
			continue
		}
		select {
		case <-p.m.closed:
			_ = nx.Close()
			return
		default:
		}
		p.install(nx)
		p.reinstated()
		return
	}
}

// reinstated runs after every new session of the path: its identity and
// ALUA state are read again before it carries I/O.
func (p *mpath) reinstated() {
	p.checked.Store(nil)
	m := p.m
	m.pathsChanged() // the new session's queue goes to the loop's next set
	m.mu.Lock()
	hooks := m.reinstated
	m.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	if !m.bound.Load() {
		m.notify()
		return
	}
	go p.checkLoop()
}

// checkRetry is the pause between checks of a path whose check failed
// while its session stays up.
const checkRetry = time.Second

// checkLoop checks the path's new session, again every checkRetry while
// the check fails and the session lasts (a path refused, closed or whose
// session ended stops it: its next session starts another).
func (p *mpath) checkLoop() {
	m := p.m
	s := p.session()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(m.base, 30*time.Second)
		err := p.check(ctx)
		cancel()
		if err == nil || p.refused.Load() || m.isClosed() {
			return
		}
		p.setErr(err)
		if attempt == 1 {
			p.log.Warn().Err(err).Dur("retry_in", checkRetry).Msg("path check failed")
		}
		if sleepCtx(m.base, checkRetry) != nil || p.session() != s || s == nil {
			return
		}
	}
}

// setErr records the path's last error.
func (p *mpath) setErr(err error) {
	p.mu.Lock()
	p.lastErr = err.Error()
	p.mu.Unlock()
}

// session returns the path's session when it is up.
func (p *mpath) session() *Session {
	nx := p.nx.Load()
	if nx == nil {
		return nil
	}
	if s := nx.up.Load(); s != nil && !s.dead.Load() {
		return s
	}
	return nil
}

// state is the path's state as status reports show it.
func (p *mpath) state() PathState {
	if p.refused.Load() {
		return PathRefused
	}
	s := p.session()
	if s == nil {
		return PathDown
	}
	if p.m.bound.Load() && p.checked.Load() != s {
		return PathChecking
	}
	switch scsi.AccessState(p.access.Load()) {
	case scsi.AccessStandby:
		return PathStandby
	case scsi.AccessUnavailable, scsi.AccessOffline:
		return PathUnavailable
	case scsi.AccessTransitioning:
		return PathTransitioning
	}
	return PathUp
}

// notify wakes I/O waiting for a path.
func (m *Multipath) notify() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// changes returns the channel the next notify closes.
func (m *Multipath) changes() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// OnReinstated registers f, called after every new session of any path.
// f must not block.
func (m *Multipath) OnReinstated(f func()) {
	m.mu.Lock()
	m.reinstated = append(m.reinstated, f)
	m.mu.Unlock()
}

// Paths returns a snapshot of every path, in the configured order.
func (m *Multipath) Paths() []PathStatus {
	out := make([]PathStatus, len(m.paths))
	for i, p := range m.paths {
		st := PathStatus{Portal: p.portal, State: p.state(), IOs: p.ios.Load(),
			InFlight: p.inflight.Load(), Failovers: p.failovers.Load()}
		if a := p.access.Load(); a != accessUnknown {
			st.ALUA = scsi.AccessState(a).String()
		}
		p.mu.Lock()
		st.Group, st.Preferred, st.LastError = p.group, p.preferred, p.lastErr
		p.mu.Unlock()
		st.Nexus.State = NexusRecovering // never logged in yet
		if nx := p.nx.Load(); nx != nil {
			st.Nexus = nx.Status()
			if st.Nexus.LastError != nil && st.LastError == "" {
				st.LastError = st.Nexus.LastError.Error()
			}
		}
		out[i] = st
	}
	return out
}

// Status sums the paths up as one NexusStatus: up while a path carries
// I/O (Portal is then the first such path's), recovering otherwise; the
// counters are the paths' sums.
func (m *Multipath) Status() NexusStatus {
	st := NexusStatus{State: NexusRecovering}
	select {
	case <-m.closed:
		st.State = NexusClosed
	default:
	}
	for _, p := range m.paths {
		nx := p.nx.Load()
		if nx == nil {
			continue
		}
		ns := nx.Status()
		st.Recoveries += ns.Recoveries
		st.Faults += ns.Faults
		st.CommandTimeouts += ns.CommandTimeouts
		if st.State == NexusRecovering && p.state() == PathUp {
			st.State, st.Portal, st.Transport = NexusUp, ns.Portal, ns.Transport
		}
		if st.Transport == "" {
			st.Transport = ns.Transport
		}
		if ns.LastError != nil {
			st.LastError = ns.LastError
		}
		if !ns.DownSince.IsZero() && (st.DownSince.IsZero() || ns.DownSince.Before(st.DownSince)) {
			st.DownSince = ns.DownSince
		}
	}
	if st.State == NexusUp {
		st.DownSince = time.Time{}
	} else if since := m.noPathSince.Load(); st.State == NexusRecovering && since != 0 &&
		time.Since(time.Unix(0, since)) > m.cfg.NoPathTimeout {
		st.State = NexusFailed // I/O fails with EIO until a path is back
	}
	if st.Portal == "" {
		st.Portal = m.paths[0].portal
	}
	return st
}

// TargetName is the IQN every path logs in to.
func (m *Multipath) TargetName() string { return m.paths[0].cfg.Session.TargetName }

// InitiatorName is the initiator name every path logs in with.
func (m *Multipath) InitiatorName() string { return m.paths[0].cfg.Session.InitiatorName }

// IOBuffers returns nil: the paths' datamovers each register memory of
// their own, and a buffer shared by every path is not built yet, so iSER
// paths copy through their bounce buffers.
func (m *Multipath) IOBuffers(count, size int) ([][]byte, error) { return nil, nil }

// Close logs every path out and stops their recovery. I/O waiting for a
// path fails with ErrSessionClosed.
func (m *Multipath) Close() error {
	var errs []error
	m.closeOnce.Do(func() {
		close(m.closed)
		m.cancel()
		m.notify()
		m.wg.Wait()
		for _, p := range m.paths {
			if nx := p.nx.Load(); nx != nil {
				if err := nx.Close(); err != nil && !p.refused.Load() {
					errs = append(errs, fmt.Errorf("path %s: %w", p.portal, err))
				}
			}
		}
	})
	return errors.Join(errs...)
}
