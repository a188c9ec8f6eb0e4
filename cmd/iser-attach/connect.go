package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/discovery"
	"github.com/iser-attach/iser-attach/initiator"
)

// targetFlags select a LUN; used by every command that logs in to a target.
func targetFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringSliceFlag{Name: "portal", Usage: "target portal: host, host:port or [v6]:port (port 3260 by default); repeat for more portals, tried in turn on recovery"},
		&cli.StringFlag{Name: "target", Usage: "target IQN"},
		&cli.UintFlag{Name: "lun", Usage: "logical unit number (tgt's LUN 0 is its controller)", DefaultText: "the target's lowest-numbered disk"},
		&cli.StringFlag{Name: "transport", Value: "auto", Usage: "auto, iser or tcp"},
		&cli.IntFlag{Name: "queue-depth", Value: 128, Usage: "SCSI commands in flight"},
		&cli.DurationFlag{Name: "login-timeout", Value: 15 * time.Second, Usage: "time allowed for connecting and logging in"},
		&cli.DurationFlag{Name: "replacement-timeout", Value: initiator.DefaultReplacementTimeout, Usage: "how long I/O waits for a lost session to be reinstated before it fails with EIO (recovery goes on)"},
		&cli.DurationFlag{Name: "nop-interval", Value: 5 * time.Second, Usage: "NOP-Out keepalive interval on an idle connection (0 disables)"},
		&cli.DurationFlag{Name: "nop-timeout", Value: 5 * time.Second, Usage: "time allowed for the NOP-In answer before the connection counts as lost"},
		&cli.DurationFlag{Name: "command-timeout", Value: initiator.DefaultCommandTimeout, Usage: "time a SCSI command may go without status (or wait for a closed CmdSN window) before it is aborted, then the LUN reset, then the session dropped and the command reissued"},
	}, authFlags()...)
}

// lunSpec is everything needed to log in and open a LUN, from flags or a
// volume configuration file.
type lunSpec struct {
	Volume        string   // volume name, "" outside attach
	Portals       []string // host:port
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
}

// portalAddr parses a PORTAL argument into host:port.
func portalAddr(s string) (string, error) {
	p, err := discovery.ParsePortal(s)
	if err != nil {
		return "", fmt.Errorf("portal %q: %w", s, err)
	}
	return p.String(), nil
}

// specFromFlags reads targetFlags.
func specFromFlags(c *cli.Context) (*lunSpec, error) {
	if len(c.StringSlice("portal")) == 0 {
		return nil, usageErrorf(c, "required flag --portal not given")
	}
	if c.String("target") == "" {
		return nil, usageErrorf(c, "required flag --target not given")
	}
	if err := initiator.CheckName(c.String("target")); err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	sp := &lunSpec{Target: c.String("target"), Transport: c.String("transport"), QueueDepth: c.Int("queue-depth"),
		LoginTimeout: c.Duration("login-timeout"), ReplacementTimeout: c.Duration("replacement-timeout"),
		NOPInterval: c.Duration("nop-interval"), NOPTimeout: c.Duration("nop-timeout"),
		CommandTimeout: c.Duration("command-timeout")}
	for _, p := range c.StringSlice("portal") {
		addr, err := portalAddr(p)
		if err != nil {
			return nil, err
		}
		sp.Portals = append(sp.Portals, addr)
	}
	n := c.Uint("lun")
	if n > 16383 {
		return nil, usageErrorf(c, "--lun %d: at most 16383", n)
	}
	sp.LUN, sp.AnyLUN = uint16(n), !c.IsSet("lun")
	if sp.ReplacementTimeout < 0 || sp.NOPInterval < 0 || sp.NOPTimeout <= 0 {
		return nil, errors.New("--replacement-timeout and --nop-interval must not be negative, --nop-timeout must be positive")
	}
	if sp.CommandTimeout <= 0 {
		return nil, fmt.Errorf("--command-timeout %v: must be positive", sp.CommandTimeout)
	}
	var err error
	if sp.InitiatorName, err = initiatorName(c.String("initiator-name")); err != nil {
		return nil, err
	}
	if sp.CHAP, err = chapFromFlags(c); err != nil {
		return nil, err
	}
	return sp, nil
}

// lunConn is an open LUN and the nexus it runs on.
type lunConn struct {
	*initiator.LUN
	nx *initiator.Nexus
}

// Close logs out.
func (l *lunConn) Close() error { return l.nx.Close() }

// openLUN logs in to the spec's target (trying its portals in turn) and
// opens its LUN, or without one its first disk (pickLUN). The nexus reinstates the session when it is lost; with a
// volume name its ISID comes from the name, so a restarted attach
// reinstates the session its predecessor left.
func openLUN(ctx context.Context, sp *lunSpec) (*lunConn, error) {
	lctx, cancel := context.WithTimeout(ctx, sp.LoginTimeout*time.Duration(len(sp.Portals)))
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
	return &lunConn{LUN: l, nx: nx}, nil
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

// loginSpec logs in to the spec's target, trying its portals in turn.
func loginSpec(lctx context.Context, sp *lunSpec) (*initiator.Nexus, zerolog.Logger, error) {
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
	nx, err := initiator.DialNexus(lctx, initiator.NexusConfig{
		Portals: sp.Portals,
		Dial:    initiator.DialConfig{Transport: sp.Transport, QueueDepth: sp.QueueDepth, Logger: log},
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
	})
	if err != nil {
		return nil, log, err
	}
	st := nx.Status()
	log.Info().Str("portal", st.Portal).Str("transport", st.Transport).Msg("logged in")
	return nx, log, nil
}

// openLUNFromFlags is openLUN for the commands that take targetFlags only.
func openLUNFromFlags(ctx context.Context, c *cli.Context) (*lunConn, error) {
	sp, err := specFromFlags(c)
	if err != nil {
		return nil, err
	}
	return openLUN(ctx, sp)
}
