package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/ublk"
	"github.com/iser-attach/iser-attach/volume"
)

// blockDevice is an attached frontend: /dev/ublkbN or /dev/nbdN.
type blockDevice interface {
	Path() string
	// Detach removes the device after the I/O in flight completed.
	Detach(ctx context.Context) error
}

// attachSpec is a volume to attach: the LUN and how to expose it.
type attachSpec struct {
	lunSpec
	Frontend       string
	Queues         int    // ublk hardware queues
	IOScheduler    string // ublk: a new device's I/O scheduler, or "keep"
	NBDConnections int    // nbd sockets per device
	MetricsListen  string
	ReadOnly       bool // writes refused by the frontend, never sent
}

// frontendFunc creates a block device serving b (the LUN, counted).
type frontendFunc func(ctx context.Context, sp *attachSpec, b *counting.Backend, l *lunConn) (blockDevice, error)

// frontends are registered by frontend_*.go.
var frontends = map[string]frontendFunc{}

// frontendChecks tell, before any login, whether a frontend can work on
// this host (its kernel driver loaded or loadable); registered by
// frontend_*.go. A frontend without a check is taken as available.
var frontendChecks = map[string]func(context.Context) error{}

// checkFrontend runs the frontend's check, so a host without ublk_drv or
// nbd fails at once instead of after a login.
func checkFrontend(ctx context.Context, name string) error {
	check, ok := frontendChecks[name]
	if !ok {
		return nil
	}
	if err := check(ctx); err != nil {
		return fmt.Errorf("--frontend %s: %w", name, err)
	}
	return nil
}

const daemonChildEnv = "ISER_ATTACH_DAEMON_CHILD"

// readOnlyFlag is attach's and serve's --read-only.
func readOnlyFlag() cli.Flag {
	return &cli.BoolFlag{Name: "read-only", Usage: "expose the LUN read-only: the frontend refuses writes, trims and write-zeroes (EPERM or EROFS) and never sends them to the target"}
}

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "log in and expose a LUN as a local block device; prints its path when ready and keeps serving",
		ArgsUsage: "[NAME]", // a configured volume: the same as --volume NAME
		Flags: append(append(targetFlags(), sessionFlags()...),
			&cli.BoolFlag{Name: "all-portals", Usage: "also log in through every other portal SendTargets lists for the target (a path each)"},
			&cli.StringFlag{Name: "volume", Usage: "attach the volume configured in /etc/iser-attach/volumes/NAME.conf (other flags then are not allowed)"},
			&cli.StringFlag{Name: "frontend", Value: "ublk", Usage: "ublk or nbd"},
			&cli.StringFlag{Name: "name", Usage: "volume name (default: from the target IQN and LUN)"},
			&cli.BoolFlag{Name: "daemon", Usage: "detach into the background once the device is ready"},
			&cli.IntFlag{Name: "queues", Value: 1, Usage: "ublk: hardware queues (they share one connection; one queue is the fastest)"},
			ioSchedulerFlag(volume.DefaultIOScheduler),
			&cli.IntFlag{Name: "nbd-connections", Value: 4, Usage: "nbd: sockets per device"},
			metricsListenFlag(),
			readOnlyFlag(),
		),
		Action: func(c *cli.Context) error {
			sp, err := attachSpecFrom(c)
			if err != nil {
				return err
			}
			if c.Bool("daemon") && os.Getenv(daemonChildEnv) == "" {
				// Fail here, before the child logs in, when the volume is
				// attached; the child takes the lock itself.
				if err := volume.CheckNotAttached(c.Context, sp.Volume); err != nil {
					return err
				}
				return daemonize(sp.Volume)
			}
			return runAttached(c, sp)
		},
	}
}

// attachSpecFrom reads --volume's configuration file, or the flags.
func attachSpecFrom(c *cli.Context) (*attachSpec, error) {
	v := c.String("volume")
	if c.NArg() > 1 || c.NArg() == 1 && v != "" && v != c.Args().First() {
		return nil, usageErrorf(c, "expected one volume, NAME or --volume NAME; got %q and --volume %q", c.Args().Slice(), v)
	} else if c.NArg() == 1 {
		v = c.Args().First() // attach NAME is attach --volume NAME
	}
	if v != "" {
		if err := volume.ValidName(v); err != nil {
			return nil, usageErrorf(c, "--volume: %v", err)
		}
		for _, f := range c.LocalFlagNames() {
			switch f {
			case "volume", "daemon", "initiator-name":
			default:
				return nil, usageErrorf(c, "--volume %s: --%s is not allowed with --volume (the configuration file says it)", v, f)
			}
		}
		return specFromVolume(c, v)
	}
	lsp, err := specFromFlags(c)
	if err != nil {
		return nil, err
	}
	sp := &attachSpec{lunSpec: *lsp, Frontend: c.String("frontend"), Queues: c.Int("queues"),
		IOScheduler:    c.String("io-scheduler"),
		NBDConnections: c.Int("nbd-connections"), MetricsListen: c.String("metrics-listen"), ReadOnly: c.Bool("read-only")}
	sp.Volume = c.String("name")
	if sp.Volume == "" {
		sp.Volume = sp.defaultName()
	}
	if err := volume.ValidName(sp.Volume); err != nil {
		return nil, usageErrorf(c, "--name: %v", err) // the default name is always valid
	}
	if _, ok := frontends[sp.Frontend]; !ok {
		return nil, usageErrorf(c, "--frontend %q: want ublk or nbd", sp.Frontend)
	}
	if sp.Queues < 1 || sp.Queues > 4096 {
		return nil, usageErrorf(c, "--queues %d: want 1 to 4096", sp.Queues)
	}
	if err := volume.ValidIOScheduler(sp.IOScheduler); err != nil {
		return nil, usageErrorf(c, "--io-scheduler: %v", err)
	}
	if sp.NBDConnections < 1 || sp.NBDConnections > 64 {
		return nil, usageErrorf(c, "--nbd-connections %d: want 1 to 64", sp.NBDConnections)
	}
	if err := checkListenSpec(c, "metrics-listen", sp.MetricsListen); err != nil {
		return nil, err
	}
	return sp, nil
}

var nameJunk = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func defaultVolumeName(target string, lun uint) string {
	t := target
	if i := strings.LastIndexByte(t, ':'); i >= 0 && i+1 < len(t) {
		t = t[i+1:]
	}
	t = strings.Trim(nameJunk.ReplaceAllString(t, "-"), "-.")
	if len(t) > 48 {
		t = t[len(t)-48:]
	}
	if t == "" {
		t = "volume"
	}
	return fmt.Sprintf("%s-lun%d", t, lun)
}

// daemonize starts this command again in the background and returns once
// the child printed its device path (or failed; a child that exits with
// exitRefused makes the error a refusedError, so the parent exits so too).
func daemonize(name string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(volume.RunDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(volume.RunDir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), daemonChildEnv+"=1")
	cmd.Stdout, cmd.Stderr = w, logf
	cmd.SysProcAttr = daemonAttr()
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("daemon: %w", err)
	}
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "/dev/") {
		werr := cmd.Wait()
		tail, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
		err := fmt.Errorf("daemon failed: %s", lines[len(lines)-1])
		// The child's refused login is ours: the same exit status.
		var ee *exec.ExitError
		if errors.As(werr, &ee) && ee.ExitCode() == exitRefused {
			return &refusedError{err: err}
		}
		if errors.As(werr, &ee) && ee.ExitCode() == exitReserved { // and its fence refused
			return &reservedExit{err: err}
		}
		return err
	}
	fmt.Print(line)
	return cmd.Process.Release()
}

// attached is one volume being served; it implements volume.Controller.
type attached struct {
	name     string
	st       volume.Status
	dev      blockDevice
	counting *counting.Backend
	lun      *lunConn

	detachReq chan detachReq
	mu        sync.Mutex
	state     string
}

type detachReq struct {
	force bool
	done  chan error
}

func (a *attached) Status() volume.Status {
	a.mu.Lock()
	st := a.st
	state := a.state
	a.mu.Unlock()
	ns := a.lun.nx.Status()
	st.State = state
	if state == "attached" {
		st.State = nexusState(ns.State, state)
	}
	setNexusFields(&st, ns)
	setPaths(&st, a.lun)
	st.Counters = a.counting.Counters()
	return st
}

// nexusState is the state a status report shows for a volume or serve
// process whose Nexus is in s: recovering or failed while the Nexus is,
// healthy otherwise.
func nexusState(s initiator.NexusState, healthy string) string {
	switch s {
	case initiator.NexusRecovering:
		return "recovering"
	case initiator.NexusFailed:
		return "failed"
	}
	return healthy
}

// setNexusFields copies the session fields of ns (portal, transport,
// recoveries, faults, last error) into st.
// setPaths fills st.Paths from a multipath LUN's paths.
func setPaths(st *volume.Status, l *lunConn) {
	st.Paths = pathStatuses(l.paths())
}

func setNexusFields(st *volume.Status, ns initiator.NexusStatus) {
	st.Portal, st.Transport = ns.Portal, ns.Transport
	st.Recoveries, st.Faults = ns.Recoveries, ns.Faults
	st.CommandTimeouts = ns.CommandTimeouts
	if ns.LastError != nil {
		st.LastError = ns.LastError.Error()
	}
}

func (a *attached) Detach(ctx context.Context, force bool) error {
	if !force {
		if busy, where := volume.InUse(a.dev.Path()); busy {
			return fmt.Errorf("%s is in use (%s); unmount it first or use --force", a.dev.Path(), where)
		}
	}
	req := detachReq{force: force, done: make(chan error, 1)}
	select {
	case a.detachReq <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// safeStopper is a device that can stop only while nobody has it open (ublk
// with UBLK_F_SAFE_STOP_DEV): the kernel decides, closing the moment
// between volume.InUse's check and the removal.
type safeStopper interface {
	// SafeStop says whether the kernel can refuse (ublk: the driver offers
	// UBLK_F_SAFE_STOP_DEV); without it the removal keeps its usual place
	// in detachVolume.
	SafeStop() bool
	StopIfUnused(ctx context.Context) error
}

func (u *ublkDevice) SafeStop() bool { return u.d.Features()&ublk.FlagSafeStopDev != 0 }

func (u *ublkDevice) StopIfUnused(ctx context.Context) error { return u.d.StopIfUnused(ctx) }

// stopIfUnused, for a detach without --force or a signal (req nil), stops
// a safeStopper device unless it is open; it fails only when the kernel
// refused because it is (the device stays served). Other devices (ublk
// without the feature, nbd), and a forced detach, are left to detachVolume.
func (a *attached) stopIfUnused(req *detachReq) error {
	sd, ok := a.dev.(safeStopper)
	if !ok || !sd.SafeStop() || req != nil && req.force {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sd.StopIfUnused(ctx); errors.Is(err, ublk.ErrOpen) {
		return err
	}
	return nil // stopped, or failed otherwise: detachVolume's removal reports it
}

func (a *attached) setState(s string) {
	a.mu.Lock()
	a.state = s
	a.mu.Unlock()
}

// runAttached logs in, creates the device and its stable links, serves
// until a detach request or a signal, then detaches: remove the links and
// the device (its I/O drained), flush the target's cache, log out. A lost
// session does not end it: the nexus reinstates the session while the
// device stays.
func runAttached(c *cli.Context, sp *attachSpec) error {
	ctx, stop := signalContext(c)
	defer stop()
	name := sp.Volume
	// Before any login: a second login with the volume's ISID would
	// reinstate, and so end, the session of the process serving it.
	lock, err := volume.AcquireLock(name)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := volume.CheckSocket(ctx, name); err != nil {
		return err
	}
	if err := checkFrontend(ctx, sp.Frontend); err != nil {
		return err
	}
	if err := checkLeftDevice(name, sp.Frontend); err != nil {
		return err
	}
	releaseLeftNBD(ctx, name)
	me, err := listenMetrics(sp.MetricsListen)
	if err != nil {
		return err
	}
	defer me.Close()
	l, err := openLUNRetrying(ctx, sp)
	if err != nil {
		return err
	}
	defer l.Close()
	counting := counting.New(l.LUN)
	counting.OnError = newIOErrorLog(logger).report
	defer counting.Close()
	me.add(name, l, counting.IO())
	dev, err := frontends[sp.Frontend](ctx, sp, counting, l)
	if err != nil {
		return fmt.Errorf("attach %s: %w", name, err)
	}
	info := l.Info()
	ns := l.nx.Status()
	a := &attached{name: name, dev: dev, counting: counting, lun: l, detachReq: make(chan detachReq), state: "attached",
		st: volume.Status{Name: name, Device: dev.Path(), Portal: ns.Portal, Target: sp.Target,
			LUN: info.Number, Transport: ns.Transport, Frontend: sp.Frontend, PID: os.Getpid(), WWN: info.WWN,
			Initiator: sp.InitiatorName, ReadOnly: sp.ReadOnly || info.WriteProtected,
			Since: time.Now().UTC().Format(time.RFC3339)}}
	resizer{rescan: l.Rescan, dev: dev}.followCapacity(l.OnCapacityChange, name)
	ctl, err := volume.ListenControl(name, a)
	if err != nil {
		// A device taken over (ublk recovery) may be mounted: leave it to
		// the next attach rather than remove it under its users (or when
		// InUse cannot tell).
		if rd, ok := dev.(recoverableDevice); ok {
			if busy, where := volume.InUse(dev.Path()); busy {
				a.leave(rd, where)
				return err
			}
		}
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = dev.Detach(dctx)
		cancel()
		return err
	}
	defer ctl.Close()
	link, err := createLinks(name, dev.Path(), info.WWN)
	if err != nil {
		logger.Warn().Err(err).Str("volume", name).Msg("stable device names")
	}
	a.mu.Lock()
	a.st.Link = link
	a.mu.Unlock()
	if err := lock.SetDevice(dev.Path()); err != nil {
		logger.Warn().Err(err).Str("volume", name).Msg("attach lock")
	}
	fmt.Println(dev.Path())
	notifyReady(dev.Path())
	logger.Info().Str("volume", name).Str("device", dev.Path()).Str("link", link).Str("portal", ns.Portal).
		Str("transport", ns.Transport).Msg("attached")

	var req *detachReq
wait:
	for {
		select {
		case <-ctx.Done():
			logger.Info().Str("volume", name).Msg("signal: detaching")
			var left bool
			req, left = a.stopOnSignal()
			if left {
				return nil
			}
		case r := <-a.detachReq:
			req = &r
		}
		err := a.stopIfUnused(req)
		switch {
		case err == nil:
			break wait
		case req != nil: // a detach without --force: refused, keep serving
			req.done <- fmt.Errorf("%s is in use (opened as it was being removed); unmount it first or use --force: %w", dev.Path(), err)
			req = nil
		default: // a signal: leave the device to the next attach
			if rd, ok := dev.(recoverableDevice); ok {
				a.leave(rd, "opened as it was being removed")
			}
			return nil
		}
	}
	sdNotify("STOPPING=1")
	a.setState("detaching")
	removeLinks(name, dev.Path(), info.WWN)
	err = detachVolume(dev, l)
	if err == nil {
		logger.Info().Str("volume", name).Str("device", dev.Path()).Msg("detached cleanly: device removed, cache flushed, logged out")
	}
	if req != nil {
		req.done <- err
	}
	return err
}

// openLUNRetrying is openLUN; under systemd (NOTIFY_SOCKET) a first login
// that fails is retried until it works or a signal comes, so a volume
// whose target is not up yet at boot attaches when it is (the unit's
// TimeoutStartSec bounds the wait), and the mounts waiting for it follow.
// A login the target refused for good (a refusedError: a wrong secret, an
// initiator not allowed, no such target) is not retried: it ends attach at
// once with exit status 3, which the unit's RestartPreventExitStatus=
// keeps systemd from restarting.
func openLUNRetrying(ctx context.Context, sp *attachSpec) (*lunConn, error) {
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		l, err := openLUN(ctx, &sp.lunSpec)
		if err == nil || os.Getenv("NOTIFY_SOCKET") == "" || ctx.Err() != nil {
			return l, err
		}
		var refused *refusedError
		if errors.As(err, &refused) {
			logger.Error().Err(err).Str("volume", sp.Volume).Int("attempt", attempt).
				Msg("the target refused the login; not retrying (retrying cannot help)")
			return nil, err
		}
		logger.Warn().Err(err).Str("volume", sp.Volume).Int("attempt", attempt).Dur("retry_in", backoff).
			Msg("login failed; retrying (under systemd)")
		sdNotify(fmt.Sprintf("STATUS=login failed (attempt %d): %s", attempt, oneLine(err)))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, err
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// recoverableDevice is a device that can outlive its server and be
// taken over by the next attach of the volume (ublk user recovery).
type recoverableDevice interface {
	blockDevice
	// Leave stops serving the device without removing it.
	Leave() error
}

// stillUsedEvery is how often a signalled daemon whose device cannot be
// left behind says that it waits for the device to be released.
const stillUsedEvery = 20 * time.Second

// stopOnSignal decides what a signal (SIGTERM, SIGINT) does. A device
// nothing uses is removed as a detach would (the caller goes on with it).
// A device in use (volume.InUse: mounted in any mount namespace, held, open
// or claimed; a check that cannot be made counts as in use) is never
// removed under its users:
// a ublk device is flushed and left quiesced for the next attach, which
// takes it over, and left reports that it was; a kernel NBD device, which
// cannot outlive us, is served until it is released (then removed) or a
// forced detach comes through the control socket (returned).
func (a *attached) stopOnSignal() (req *detachReq, left bool) {
	dev := a.dev.Path()
	busy, where := volume.InUse(dev)
	if !busy {
		return nil, false
	}
	if rd, ok := a.dev.(recoverableDevice); ok {
		a.leave(rd, where)
		return nil, true
	}
	logger.Error().Str("volume", a.name).Str("device", dev).Str("held_by", where).
		Msg("asked to stop while the device is in use: serving it until it is released (kernel NBD cannot outlive its server)")
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := a.lun.Flush(fctx); err != nil {
		logger.Warn().Err(err).Str("volume", a.name).Msg("SYNCHRONIZE CACHE")
	}
	cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastSaid := time.Now()
	for {
		select {
		case r := <-a.detachReq:
			return &r, false
		case <-tick.C:
		}
		busy, where := volume.InUse(dev)
		if !busy {
			return nil, false
		}
		if time.Since(lastSaid) >= stillUsedEvery {
			lastSaid = time.Now()
			logger.Warn().Str("volume", a.name).Str("device", dev).Str("held_by", where).
				Msg("still in use: not removing it; unmount it, or detach --force")
		}
	}
}

// leaveBudget bounds leave before the logout: the device's Leave
// (ublk.DetachTimeout) and the SYNCHRONIZE CACHE after it.
const leaveBudget = 25 * time.Second

// leave stops serving the ublk device and leaves it, quiesced, to the next
// attach of the volume: what a crash would do, but with the requests in
// flight completed and the target's cache flushed, and a clean logout.
func (a *attached) leave(rd recoverableDevice, where string) {
	dev := rd.Path()
	a.setState("detaching")
	sdNotify("STOPPING=1")
	errs := []error{}
	// One budget for both: Leave returns within its own bound (requests
	// whose backend calls are stuck are abandoned, for the next server),
	// and SYNCHRONIZE CACHE gets what remains.
	ctx, cancel := context.WithTimeout(context.Background(), leaveBudget)
	defer cancel()
	if err := rd.Leave(); err != nil {
		errs = append(errs, fmt.Errorf("leave %s: %w", dev, err))
	}
	if err := a.lun.Flush(ctx); err != nil {
		errs = append(errs, fmt.Errorf("SYNCHRONIZE CACHE: %w", err))
	}
	if err := a.lun.Close(); err != nil {
		errs = append(errs, fmt.Errorf("logout: %w", err))
	}
	ev := logger.Warn()
	if err := errors.Join(errs...); err != nil {
		ev = logger.Error().Err(err)
	}
	ev.Str("volume", a.name).Str("device", dev).Str("held_by", where).
		Msg("stopped while the device is in use: left it for the next attach of the volume, which takes it over (I/O waits meanwhile)")
}

// detachVolume removes the device, flushes the target's cache and logs out.
func detachVolume(dev blockDevice, l *lunConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []error
	if err := dev.Detach(ctx); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dev.Path(), err))
	}
	if l.nx.Status().State == initiator.NexusUp {
		if err := l.Flush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("final SYNCHRONIZE CACHE: %w", err))
		}
		if err := l.unfence(ctx); err != nil {
			errs = append(errs, fmt.Errorf("release the reservation: %w", err))
		}
	} else {
		errs = append(errs, fmt.Errorf("final SYNCHRONIZE CACHE: session is down (%s)", l.nx.Status().State))
	}
	if err := l.Close(); err != nil {
		errs = append(errs, fmt.Errorf("logout: %w", err))
	}
	return errors.Join(errs...)
}
