package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/discovery"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/volume"
)

// targetFlags select a LUN and log in to it; used by every command that
// logs in to a target (info, serve, attach).
func targetFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringSliceFlag{Name: "portal", Usage: "target portal: host, host:port, [v6]:port, each optionally ,TPGT as iscsiadm prints it (10.0.0.1:3260,1: the login checks the target's portal group tag); port 3260 by default; repeat for more portals: a path each (multipath)"},
		&cli.StringFlag{Name: "target", Usage: "target IQN"},
		&cli.UintFlag{Name: "lun", Usage: "logical unit number (tgt's LUN 0 is its controller)", DefaultText: "the target's lowest-numbered disk"},
		&cli.StringFlag{Name: "transport", Value: "auto", Usage: "auto, iser or tcp"},
		&cli.DurationFlag{Name: "login-timeout", Value: volume.DefaultLoginTimeout, Usage: "time allowed for connecting and logging in (seconds, or a Go duration: 15s)"},
		&cli.DurationFlag{Name: "command-timeout", Value: volume.DefaultCommandTimeout, Usage: "time a SCSI command may go without status (or wait for a closed CmdSN window) before it is aborted, then the LUN reset, then the session dropped and the command reissued (seconds, or a Go duration)"},
	}, authFlags()...)
}

// sessionFlags tune a session that lasts (serve, attach): queue depth,
// keepalive and recovery; info's short session has no use for them.
func sessionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "queue-depth", Value: volume.DefaultQueueDepth, Usage: "SCSI commands in flight, 1 to 1024"},
		&cli.DurationFlag{Name: "replacement-timeout", Value: volume.DefaultReplacementTimeout, Usage: "how long I/O waits for a lost session to be reinstated before it fails with EIO (recovery goes on; seconds, or a Go duration: 2m)"},
		&cli.DurationFlag{Name: "nop-interval", Value: volume.DefaultNOPInterval, Usage: "NOP-Out keepalive interval on an idle connection (0 disables; seconds, or a Go duration)"},
		&cli.DurationFlag{Name: "nop-timeout", Value: volume.DefaultNOPTimeout, Usage: "time allowed for the NOP-In answer before the connection counts as lost (seconds, or a Go duration)"},
		noPathTimeoutFlag(),
		pathSelectorFlag(),
		&cli.StringFlag{Name: "reservation-key", Usage: "fence the LUN with a persistent reservation (Write Exclusive, Registrants Only) under this key (hex, up to 16 digits, not 0), registered on every path: refused with exit status 4 while another key holds it, released on detach"},
		&cli.BoolFlag{Name: "preempt", Usage: "with --reservation-key: take the reservation from the key holding it (a node that is gone); that node's writes fail from then on"},
	}
}

// parseReservationKey reads --reservation-key: hex, an optional 0x, 1 to
// 16 digits, not zero (SPC-4's key 0 means none).
func parseReservationKey(s string) (uint64, error) {
	h := strings.TrimPrefix(strings.ToLower(s), "0x")
	if h == "" || len(h) > 16 {
		return 0, fmt.Errorf("%q: want 1 to 16 hex digits", s)
	}
	k, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want hex digits", s)
	}
	if k == 0 {
		return 0, fmt.Errorf("%q: key 0 means no key", s)
	}
	return k, nil
}

// pathSelectorFlag is --path-selector, for attach, serve and volume add.
func pathSelectorFlag() cli.Flag {
	return &cli.StringFlag{Name: "path-selector", Value: volume.DefaultPathSelector,
		Usage: "with several portals: how I/O chooses among the usable paths, round-robin (in turn) or queue-length (the path with the fewest commands in flight)"}
}

// noPathTimeoutFlag is --no-path-timeout; unset, the replacement timeout.
func noPathTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "no-path-timeout", DefaultText: "the replacement timeout",
		Usage: "with several portals: how long I/O waits while no path is usable before it fails with EIO (seconds, or a Go duration)"}
}

// noPathTimeout is --no-path-timeout's value, negative when unset.
func noPathTimeout(c *cli.Context) time.Duration {
	if !c.IsSet("no-path-timeout") {
		return -1
	}
	return c.Duration("no-path-timeout")
}

// lunSpec is everything needed to log in and open a LUN, from flags or a
// volume configuration file.
type lunSpec struct {
	Volume        string   // volume name, "" outside attach
	Portals       []string // host:port
	PortalTags    []int    // each portal's group tag (host:port,tpgt) or -1; the login checks it
	Target        string
	LUN           uint16
	AnyLUN        bool // no LUN given: the lowest-numbered disk (pickLUN)
	Transport     string
	QueueDepth    int
	InitiatorName string
	CHAP          *initiator.CHAPCredentials
	LoginTimeout  time.Duration
	// ReplacementTimeout, NOPInterval, NOPTimeout: see targetFlags.
	ReplacementTimeout, NOPInterval, NOPTimeout time.Duration
	// CommandTimeout: see targetFlags.
	CommandTimeout time.Duration
	// NoPathTimeout is how long a multipath LUN's I/O waits while no path
	// is usable; negative means ReplacementTimeout.
	NoPathTimeout time.Duration
	// AllPortals adds, before the login, every portal SendTargets lists
	// for the target (--all-portals, all_portals).
	AllPortals bool
	// PathSelector chooses among a multipath LUN's usable paths
	// (--path-selector, path_selector).
	PathSelector initiator.PathSelector
	// ReservationKey, when not 0, fences the LUN (LUN.Fence) once it is
	// open; Preempt takes the reservation from another holder.
	ReservationKey uint64
	Preempt        bool
}

// addDiscoveredPortals asks the spec's portals for the target's portals
// (SendTargets) and adds those it lacks, each with the portal group tag
// reported. A portal whose discovery fails is logged and skipped.
func (sp *lunSpec) addDiscoveredPortals(ctx context.Context) {
	given := append([]string(nil), sp.Portals...)
	for _, addr := range given {
		dctx, cancel := initiator.LoginContext(ctx, sp.LoginTimeout)
		targets, err := discovery.SendTargets(dctx, discovery.Config{Portal: addr, InitiatorName: sp.InitiatorName,
			CHAP: sp.CHAP, Logger: logger})
		cancel()
		if err != nil {
			logger.Warn().Err(err).Str("portal", addr).Msg("--all-portals: discovery failed on this portal")
			continue
		}
		for _, t := range targets {
			if t.Name != sp.Target {
				continue
			}
			for _, p := range t.Portals {
				if slices.Contains(sp.Portals, p.String()) {
					continue
				}
				sp.Portals = append(sp.Portals, p.String())
				sp.PortalTags = append(sp.PortalTags, p.GroupTag)
				logger.Info().Str("portal", p.String()).Str("target", sp.Target).Str("from", addr).
					Msg("--all-portals: portal added")
			}
		}
	}
}

// portalAddr parses a PORTAL argument (host[:port][,tpgt]) into host:port
// and its portal group tag (-1 when none was given).
func portalAddr(s string) (string, int, error) {
	p, err := discovery.ParsePortal(s)
	if err != nil {
		return "", -1, fmt.Errorf("portal %q: %w", s, err)
	}
	return p.String(), p.GroupTag, nil
}

// addPortal adds the PORTAL argument s to sp.
func (sp *lunSpec) addPortal(s string) error {
	addr, tag, err := portalAddr(s)
	if err != nil {
		return err
	}
	sp.Portals = append(sp.Portals, addr)
	sp.PortalTags = append(sp.PortalTags, tag)
	return nil
}

// specFromFlags reads targetFlags and, where the command has them,
// sessionFlags (the defaults otherwise). Every mistake in their values is
// a usage error.
func specFromFlags(c *cli.Context) (*lunSpec, error) {
	if len(c.StringSlice("portal")) == 0 {
		return nil, usageErrorf(c, "required flag --portal not given")
	}
	if c.String("target") == "" {
		return nil, usageErrorf(c, "required flag --target not given")
	}
	if err := initiator.CheckName(c.String("target")); err != nil {
		return nil, usageErrorf(c, "--target: %v", err)
	}
	sp := &lunSpec{Target: c.String("target"), Transport: c.String("transport"), QueueDepth: volume.DefaultQueueDepth,
		LoginTimeout: c.Duration("login-timeout"), ReplacementTimeout: volume.DefaultReplacementTimeout,
		NOPInterval: volume.DefaultNOPInterval, NOPTimeout: volume.DefaultNOPTimeout,
		CommandTimeout: c.Duration("command-timeout"), NoPathTimeout: -1}
	var err error
	if hasFlag(c, "queue-depth") {
		sp.QueueDepth, sp.ReplacementTimeout = c.Int("queue-depth"), c.Duration("replacement-timeout")
		sp.NOPInterval, sp.NOPTimeout = c.Duration("nop-interval"), c.Duration("nop-timeout")
		sp.NoPathTimeout = noPathTimeout(c)
		sel, err := initiator.ParsePathSelector(c.String("path-selector"))
		if err != nil {
			return nil, usageErrorf(c, "--path-selector: %v", err)
		}
		sp.PathSelector = sel
		if k := c.String("reservation-key"); k != "" {
			if sp.ReservationKey, err = parseReservationKey(k); err != nil {
				return nil, usageErrorf(c, "--reservation-key %v", err)
			}
		}
		sp.Preempt = c.Bool("preempt")
		if sp.Preempt && sp.ReservationKey == 0 {
			return nil, usageErrorf(c, "--preempt needs --reservation-key")
		}
	}
	sp.AllPortals = hasFlag(c, "all-portals") && c.Bool("all-portals")
	for _, p := range c.StringSlice("portal") {
		if err := sp.addPortal(p); err != nil {
			return nil, usageErrorf(c, "--portal: %v", err)
		}
	}
	n := c.Uint("lun")
	if n > 16383 {
		return nil, usageErrorf(c, "--lun %d: at most 16383", n)
	}
	sp.LUN, sp.AnyLUN = uint16(n), !c.IsSet("lun")
	switch {
	case sp.Transport != initiator.TransportAuto && sp.Transport != initiator.TransportISER && sp.Transport != initiator.TransportTCP:
		return nil, usageErrorf(c, "--transport %q: want auto, iser or tcp", sp.Transport)
	case sp.QueueDepth < 1 || sp.QueueDepth > 1024:
		return nil, usageErrorf(c, "--queue-depth %d: want 1 to 1024", sp.QueueDepth)
	case sp.LoginTimeout <= 0:
		return nil, usageErrorf(c, "--login-timeout %v: must be positive", sp.LoginTimeout)
	case sp.ReplacementTimeout < 0:
		return nil, usageErrorf(c, "--replacement-timeout %v: must not be negative", sp.ReplacementTimeout)
	case sp.NOPInterval < 0:
		return nil, usageErrorf(c, "--nop-interval %v: must not be negative", sp.NOPInterval)
	case sp.NoPathTimeout < 0 && sp.NoPathTimeout != -1:
		return nil, usageErrorf(c, "--no-path-timeout %v: must not be negative", sp.NoPathTimeout)
	case sp.NOPTimeout <= 0:
		return nil, usageErrorf(c, "--nop-timeout %v: must be positive", sp.NOPTimeout)
	case sp.CommandTimeout <= 0:
		return nil, usageErrorf(c, "--command-timeout %v: must be positive", sp.CommandTimeout)
	}
	if sp.InitiatorName, err = initiatorName(c.String("initiator-name")); err != nil {
		return nil, err
	}
	if sp.CHAP, err = chapFromFlags(c); err != nil {
		return nil, err
	}
	return sp, nil
}

// hasFlag tells whether c's command defines the flag name.
func hasFlag(c *cli.Context, name string) bool {
	if c.Command == nil {
		return false
	}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// nexusHandle is what an open LUN runs on: a Nexus (one portal) or a
// Multipath (one path per portal).
type nexusHandle interface {
	initiator.Executor
	Status() initiator.NexusStatus
	// OnReinstated registers f to run after every new session (of any
	// path), outside the I/O path.
	OnReinstated(f func())
	TargetName() string
	InitiatorName() string
	Close() error
}

// lunConn is an open LUN and the nexus it runs on.
type lunConn struct {
	*initiator.LUN
	nx nexusHandle
	// key is the reservation key fence took, 0 none; refencing says a
	// refence runs.
	key       atomic.Uint64
	refencing atomic.Bool
}

// paths reports each path of a multipath LUN, nil for a single path.
func (l *lunConn) paths() []initiator.PathStatus {
	if m, ok := l.nx.(*initiator.Multipath); ok {
		return m.Paths()
	}
	return nil
}

// Close logs out.
func (l *lunConn) Close() error { return l.nx.Close() }

// openLUN logs in to the spec's target (trying its portals in turn) and
// opens its LUN, or without one its first disk (pickLUN). The nexus reinstates the session when it is lost; with a
// volume name its ISID comes from the name, so a restarted attach
// reinstates the session its predecessor left.
func openLUN(ctx context.Context, sp *lunSpec) (*lunConn, error) {
	if sp.AllPortals {
		sp.addDiscoveredPortals(ctx)
	}
	lctx, cancel := initiator.LoginContext(ctx, sp.LoginTimeout*time.Duration(len(sp.Portals)))
	defer cancel()
	nx, log, err := loginSpec(lctx, sp)
	if err != nil {
		if initiator.LoginRefused(err) {
			return nil, &refusedError{err: err}
		}
		return nil, err
	}
	st := nx.Status()
	n, err := pickLUN(lctx, nx, sp, log)
	if err != nil {
		nx.Close()
		return nil, fmt.Errorf("%s at %s: %w", sp.Target, st.Portal, err)
	}
	l, err := initiator.OpenLUN(lctx, nx, n)
	if err != nil {
		nx.Close()
		return nil, fmt.Errorf("%s at %s: %w", sp.Target, st.Portal, err)
	}
	lc := &lunConn{LUN: l, nx: nx}
	if sp.ReservationKey != 0 {
		if err := lc.fence(lctx, sp); err != nil {
			nx.Close()
			return nil, err
		}
	}
	return lc, nil
}

// exitReserved is the exit status of an attach or serve refused because
// another key holds the LUN's reservation (a *reservedExit).
const exitReserved = 4

// reservedExit is a fence refused: another node holds the LUN.
type reservedExit struct{ err error }

func (e *reservedExit) Error() string { return e.err.Error() }
func (e *reservedExit) Unwrap() error { return e.err }

// ExitCode is exitReserved (cli.ExitCoder).
func (e *reservedExit) ExitCode() int { return exitReserved }

// fence takes the LUN's persistent reservation for sp.ReservationKey.
func (l *lunConn) fence(ctx context.Context, sp *lunSpec) error {
	f, err := l.Fence(ctx, sp.ReservationKey, sp.Preempt)
	var re *initiator.ReservedError
	if errors.As(err, &re) {
		return &reservedExit{fmt.Errorf("LUN %d of %s is %w: detach it there first, or take it over with --preempt once that node is gone",
			l.Info().Number, sp.Target, err)}
	}
	if err != nil {
		return fmt.Errorf("LUN %d of %s: %w", l.Info().Number, sp.Target, err)
	}
	if l.key.Swap(sp.ReservationKey) == 0 {
		l.nx.OnReinstated(func() { go l.refence() })
	}
	ev := logger.Info()
	if f.Preempted != 0 {
		ev = logger.Warn().Str("preempted_key", fmt.Sprintf("0x%016x", f.Preempted)).Str("preempted_initiator", f.Initiator)
	}
	ev.Str("key", fmt.Sprintf("0x%016x", sp.ReservationKey)).Str("type", initiator.FenceType.String()).Msg("reservation held")
	return nil
}

// refence takes the reservation again after a new session: a target that
// restarted without persisting it (no APTPL) has forgotten both the
// registrations and the reservation, and the volume would be unfenced.
// Held by another key by now, the volume is fenced out: its writes fail
// with RESERVATION CONFLICT, and this says so.
func (l *lunConn) refence() {
	if !l.refencing.CompareAndSwap(false, true) {
		return
	}
	defer l.refencing.Store(false)
	key := l.key.Load() // after the flag: unfence drops the key, then waits for the flag
	if key == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := l.Fence(ctx, key, false)
	var re *initiator.ReservedError
	switch {
	case errors.As(err, &re):
		logger.Error().Err(err).Str("key", fmt.Sprintf("0x%016x", key)).
			Msg("after a new session another node holds the reservation: this volume is fenced out, its writes fail")
	case err != nil:
		logger.Warn().Err(err).Str("key", fmt.Sprintf("0x%016x", key)).Msg("after a new session: fence again")
	}
}

// unfence releases the reservation fence took, if any. The key is
// dropped first, so that no refence starts, and a refence under way is
// waited for, so that it cannot reserve again after the release.
func (l *lunConn) unfence(ctx context.Context) error {
	key := l.key.Swap(0)
	if key == 0 {
		return nil
	}
	for l.refencing.Load() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("release the reservation: a refence is under way: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := l.Unfence(ctx, key); err != nil {
		return err
	}
	logger.Info().Str("key", fmt.Sprintf("0x%016x", key)).Msg("reservation released")
	return nil
}

// exitRefused is the exit status of a command whose login the target
// refused for a reason that retrying cannot fix (initiator.LoginRefused:
// authentication or authorization failed, no such target, ...).
const exitRefused = 3

// refusedError is a login refused so; main exits with exitRefused, and
// attach does not retry it.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// ExitCode is exitRefused (cli.ExitCoder).
func (e *refusedError) ExitCode() int { return exitRefused }

// Multipath's path checking: with two portals or more, a path whose
// connection goes silent is declared down within these (unless the volume
// sets its own NOP interval and timeout), and its I/O moves on.
const (
	multipathNOPInterval = 2 * time.Second
	multipathNOPTimeout  = 2 * time.Second
	// multipathRecoveryConnectTimeout bounds the connection of a path's
	// login attempts after the first (never beyond --login-timeout): a
	// connection request sent while the portal was silent is given up
	// after 5 s and sent again, so the path is back within about 5 s of
	// its portal. The login exchange keeps --login-timeout: LIO holds a
	// login given up early for its own 15 s and takes no other on that
	// portal meanwhile (84-multipath: bounding the whole login to 5 s
	// left a silent path's portal refusing logins for good).
	multipathRecoveryConnectTimeout = 5 * time.Second
)

// loginSpec logs in to the spec's target: with one portal a Nexus, with
// several a Multipath with one path per portal.
func loginSpec(lctx context.Context, sp *lunSpec) (nexusHandle, zerolog.Logger, error) {
	log := logger.With().Str("target", sp.Target).Logger()
	if !sp.AnyLUN {
		log = log.With().Uint16("lun", sp.LUN).Logger()
	}
	if sp.Volume != "" {
		log = log.With().Str("volume", sp.Volume).Logger()
	}
	isid := initiator.NewISID()
	if sp.Volume != "" {
		isid = initiator.ISIDFromName(sp.InitiatorName + "\x00" + sp.Volume)
	}
	nop := sp.NOPInterval
	if nop == 0 {
		nop = -1 // SessionConfig: negative disables
	}
	cfg := initiator.NexusConfig{
		Portals:         sp.Portals,
		PortalGroupTags: sp.PortalTags,
		Dial:            initiator.DialConfig{Transport: sp.Transport, QueueDepth: sp.QueueDepth, Logger: log},
		Session: initiator.SessionConfig{
			LoginConfig: initiator.LoginConfig{
				InitiatorName: sp.InitiatorName,
				TargetName:    sp.Target,
				ISID:          isid,
				CHAP:          sp.CHAP,
			},
			QueueDepth:     sp.QueueDepth,
			NOPInterval:    nop,
			NOPTimeout:     sp.NOPTimeout,
			CommandTimeout: sp.CommandTimeout,
			Logger:         log,
		},
		ReplacementTimeout: sp.ReplacementTimeout,
		LoginTimeout:       sp.LoginTimeout,
		Logger:             log,
	}
	if len(sp.Portals) > 1 {
		return loginMultipath(lctx, sp, cfg, log)
	}
	nx, err := initiator.DialNexus(lctx, cfg)
	if err != nil {
		return nil, log, err
	}
	st := nx.Status()
	log.Info().Str("portal", st.Portal).Str("transport", st.Transport).Msg("logged in")
	return nx, log, nil
}

// loginMultipath logs in through every portal of sp, one path each: its
// own ISID (the first path keeps the one a single path would have), its
// own portal group tag, and faster path checking (multipathNOPInterval)
// unless the spec sets its own.
func loginMultipath(lctx context.Context, sp *lunSpec, base initiator.NexusConfig, log zerolog.Logger) (nexusHandle, zerolog.Logger, error) {
	mc := initiator.MultipathConfig{NoPathTimeout: sp.NoPathTimeout, Selector: sp.PathSelector, Logger: log}
	if mc.NoPathTimeout < 0 {
		mc.NoPathTimeout = sp.ReplacementTimeout
	}
	for i, portal := range sp.Portals {
		pc := base
		pc.Portals = []string{portal}
		pc.PortalGroupTags = nil
		if i < len(sp.PortalTags) {
			pc.PortalGroupTags = []int{sp.PortalTags[i]}
		}
		switch {
		case i == 0:
		case sp.Volume != "":
			pc.Session.ISID = initiator.ISIDFromName(sp.InitiatorName + "\x00" + sp.Volume + "\x00" + portal)
		default:
			pc.Session.ISID = initiator.NewISID()
		}
		if sp.NOPInterval == volume.DefaultNOPInterval {
			pc.Session.NOPInterval = multipathNOPInterval
		}
		if sp.NOPTimeout == volume.DefaultNOPTimeout {
			pc.Session.NOPTimeout = multipathNOPTimeout
		}
		pc.RecoveryConnectTimeout = multipathRecoveryConnectTimeout
		pc.Logger = log.With().Str("portal", portal).Logger()
		pc.Session.Logger, pc.Dial.Logger = pc.Logger, pc.Logger
		mc.Paths = append(mc.Paths, pc)
	}
	m, err := initiator.DialMultipath(lctx, mc)
	if err != nil {
		return nil, log, err
	}
	up := 0
	for _, p := range m.Paths() {
		if p.State != initiator.PathDown {
			up++
		}
	}
	log.Info().Strs("portals", sp.Portals).Int("up", up).Str("transport", m.Status().Transport).
		Dur("no_path_timeout", mc.NoPathTimeout).Stringer("path_selector", mc.Selector).Msg("logged in: one path per portal")
	return m, log, nil
}

// openLUNFromFlags is openLUN for the commands that take targetFlags only.
func openLUNFromFlags(ctx context.Context, c *cli.Context) (*lunConn, error) {
	sp, err := specFromFlags(c)
	if err != nil {
		return nil, err
	}
	return openLUN(ctx, sp)
}
