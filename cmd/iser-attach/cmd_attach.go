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

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/volume"
)

// blockDevice is an attached frontend: /dev/ublkbN or /dev/nbdN.
type blockDevice interface {
	Path() string
	// Detach removes the device after the I/O in flight completed.
	Detach(ctx context.Context) error
}

// frontendFunc creates a block device serving b (the LUN, counted).
type frontendFunc func(ctx context.Context, c *cli.Context, name string, b *volume.Counting, l *initiator.LUN) (blockDevice, error)

// frontends are registered by frontend_*.go.
var frontends = map[string]frontendFunc{}

const daemonChildEnv = "ISER_ATTACH_DAEMON_CHILD"

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:  "attach",
		Usage: "log in and expose a LUN as a local block device; prints its path when ready and keeps serving",
		Flags: append(targetFlags(),
			&cli.StringFlag{Name: "frontend", Value: "ublk", Usage: "ublk or nbd"},
			&cli.StringFlag{Name: "name", Usage: "volume name (default: from the target IQN and LUN)"},
			&cli.BoolFlag{Name: "daemon", Usage: "detach into the background once the device is ready"},
			&cli.IntFlag{Name: "queues", Value: 1, Usage: "ublk: hardware queues"},
			&cli.IntFlag{Name: "nbd-connections", Value: 4, Usage: "nbd: sockets per device"},
		),
		Action: func(c *cli.Context) error {
			name := c.String("name")
			if name == "" {
				name = defaultVolumeName(c.String("target"), c.Uint("lun"))
			}
			if err := volume.ValidName(name); err != nil {
				return err
			}
			if _, ok := frontends[c.String("frontend")]; !ok {
				return fmt.Errorf("--frontend %q: want ublk or nbd", c.String("frontend"))
			}
			if c.Bool("daemon") && os.Getenv(daemonChildEnv) == "" {
				return daemonize(name)
			}
			return runAttached(c, name)
		},
	}
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
// the child printed its device path (or failed).
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
		_ = cmd.Wait()
		tail, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
		return fmt.Errorf("daemon failed: %s", lines[len(lines)-1])
	}
	fmt.Print(line)
	return cmd.Process.Release()
}

// attached is one volume being served; it implements volume.Controller.
type attached struct {
	name     string
	st       volume.Status
	dev      blockDevice
	counting *volume.Counting
	lun      *initiator.LUN

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
	st.State = a.state
	a.mu.Unlock()
	st.Counters = a.counting.Counters()
	return st
}

func (a *attached) Detach(ctx context.Context, force bool) error {
	if !force {
		if busy, where, err := volume.InUse(a.dev.Path()); err == nil && busy {
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

func (a *attached) setState(s string) {
	a.mu.Lock()
	a.state = s
	a.mu.Unlock()
}

// runAttached logs in, creates the device, serves until a detach request,
// a signal or a session failure, then detaches: remove the device (its
// I/O drained), flush the target's cache, log out.
func runAttached(c *cli.Context, name string) error {
	ctx, stop := signalContext(c)
	defer stop()
	l, err := openLUN(ctx, c)
	if err != nil {
		return err
	}
	sess := l.Session()
	defer sess.Close()
	counting := volume.NewCounting(l)
	defer counting.Close()
	dev, err := frontends[c.String("frontend")](ctx, c, name, counting, l)
	if err != nil {
		return fmt.Errorf("attach %s: %w", name, err)
	}
	a := &attached{name: name, dev: dev, counting: counting, lun: l, detachReq: make(chan detachReq), state: "attached",
		st: volume.Status{Name: name, Device: dev.Path(), Portal: sess.RemoteAddr(), Target: sess.TargetName(),
			LUN: l.Info().Number, Transport: sess.Transport(), Frontend: c.String("frontend"), PID: os.Getpid(),
			Since: time.Now().UTC().Format(time.RFC3339)}}
	ctl, err := volume.ListenControl(name, a)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = dev.Detach(dctx)
		cancel()
		return err
	}
	defer ctl.Close()
	fmt.Println(dev.Path())
	notifyReady(dev.Path())
	logger.Info().Str("volume", name).Str("device", dev.Path()).Str("transport", sess.Transport()).Msg("attached")

	var req *detachReq
	var failure error
	select {
	case <-ctx.Done():
		logger.Info().Str("volume", name).Msg("signal: detaching")
	case r := <-a.detachReq:
		req = &r
	case <-sess.Done():
		failure = fmt.Errorf("volume %s: %w", name, sess.Err())
		logger.Error().Err(failure).Msg("session lost: removing the device")
	}
	a.setState("detaching")
	err = detachVolume(dev, l, failure == nil)
	if req != nil {
		req.done <- err
	}
	if failure != nil {
		return failure
	}
	return err
}

// detachVolume removes the device, flushes the target's cache and logs out.
func detachVolume(dev blockDevice, l *initiator.LUN, flush bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []error
	if err := dev.Detach(ctx); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dev.Path(), err))
	}
	if flush {
		if err := l.Flush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("final SYNCHRONIZE CACHE: %w", err))
		}
	}
	if err := l.Session().Close(); err != nil {
		errs = append(errs, fmt.Errorf("logout: %w", err))
	}
	return errors.Join(errs...)
}
