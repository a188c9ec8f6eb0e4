package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/internal/looptest"
	"github.com/iser-attach/iser-attach/internal/tgttest"
	"github.com/iser-attach/iser-attach/volume"
)

// A device mounted only in another mount namespace (a container's) is in
// use for every decision that could remove it. The device here is a loop
// device standing in for /dev/ublkbN: only the kernel's O_EXCL answer
// sees that mount.
const claimedReason = "claimed by another user of the device, e.g. a mount in another mount namespace"

// SIGTERM: a ublk device is left for the next attach, not removed.
func TestSignalLeavesDeviceMountedInOtherNamespace(t *testing.T) {
	dev := &testDevice{path: looptest.Device(t)}
	looptest.MountElsewhere(t, dev.path)
	signalEnv(t)
	srv := tgttest.Start(t, tgttest.Target{})
	if err := attachThenSignal(t, srv, "test-recoverable", dev, nil); err != nil {
		t.Fatalf("attach after SIGTERM: %v", err)
	}
	if dev.removed.Load() || !dev.left.Load() {
		t.Fatalf("mounted in another namespace: removed %v, left for recovery %v", dev.removed.Load(), dev.left.Load())
	}
}

// detach without --force is refused, by the command and by the daemon
// behind the control socket; detach --force still removes it.
func TestDetachRefusesDeviceMountedInOtherNamespace(t *testing.T) {
	dev := &testDevice{path: looptest.Device(t)}
	looptest.MountElsewhere(t, dev.path)
	signalEnv(t)
	srv := tgttest.Start(t, tgttest.Target{})
	attachedDevice.Store(dev)
	done := make(chan error, 1)
	go func() {
		_, err := runInProcess("attach", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1",
			"--transport", "tcp", "--name", "db", "--frontend", "test-plain")
		done <- err
	}()
	lock := filepath.Join(volume.RunDir, "db.lock")
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(lock); strings.Contains(string(b), " "+dev.path) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("attach ended before it was ready: %v", err)
		default:
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("attach never got ready")
		}
	}
	_, err := runDetach("db")
	if err == nil || !strings.Contains(err.Error(), "db ("+dev.path+") is in use ("+claimedReason) ||
		!strings.Contains(err.Error(), "unmount it first or use --force") {
		t.Fatalf("detach: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := volume.Query(ctx, volume.SocketPath("db"), volume.Request{Op: "detach"})
	if err != nil || resp.OK || !strings.Contains(resp.Error, claimedReason) {
		t.Fatalf("detach through the control socket: %+v %v", resp, err)
	}
	if dev.removed.Load() {
		t.Fatal("removed while mounted in another namespace")
	}
	if out, err := runDetach("--force", "db"); err != nil {
		t.Fatalf("detach --force: %v: %s", err, out)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("attach did not end after detach --force")
	}
	if !dev.removed.Load() {
		t.Fatal("detach --force did not remove the device")
	}
}

// runDetach runs `iser-attach detach ARGS...` in this process while an
// attach runs in it too: an app of that command alone, which leaves the
// logger alone.
func runDetach(args ...string) (string, error) {
	var out bytes.Buffer
	app := &cli.App{Name: "iser-attach", Commands: []*cli.Command{detachCommand()}, Writer: &out, ErrWriter: &out,
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"iser-attach", "detach"}, args...))
	return out.String(), err
}

// The control socket cannot be made (another server came up): a device
// taken over is left, not removed.
func TestAttachFailureLeavesDeviceMountedInOtherNamespace(t *testing.T) {
	dev := &testDevice{path: looptest.Device(t)}
	looptest.MountElsewhere(t, dev.path)
	signalEnv(t)
	srv := tgttest.Start(t, tgttest.Target{})
	attachedDevice.Store(dev)
	_, err := runInProcess("attach", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1",
		"--transport", "tcp", "--name", "db", "--frontend", "test-racing")
	if s := racingServer.Load(); s != nil {
		s.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "already attached") {
		t.Fatalf("attach: %v", err)
	}
	if dev.removed.Load() || !dev.left.Load() {
		t.Fatalf("mounted in another namespace: removed %v, left %v", dev.removed.Load(), dev.left.Load())
	}
}

// A check that cannot be made means in use, for detach as for a signal:
// here the device path is no block device at all.
func TestInUseCheckFailingMeansInUse(t *testing.T) {
	signalEnv(t)
	notBlock := filepath.Join(t.TempDir(), "ublkb9")
	if err := os.WriteFile(notBlock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fa := &detachCounter{fakeAttached: fakeAttached{volume.Status{Name: "db", Device: notBlock, PID: 4242}}}
	ctl, err := volume.ListenControl("db", fa)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runDetach("db")
	ctl.Close()
	if err == nil || !strings.Contains(err.Error(), "is in use (cannot tell, so taken as in use: "+notBlock+" is not a block device)") {
		t.Fatalf("detach: %v", err)
	}
	if fa.n.Load() != 0 {
		t.Fatal("the daemon was asked to detach")
	}

	srv := tgttest.Start(t, tgttest.Target{})
	dev := &testDevice{path: notBlock}
	if err := attachThenSignal(t, srv, "test-recoverable", dev, nil); err != nil {
		t.Fatalf("attach after SIGTERM: %v", err)
	}
	if dev.removed.Load() || !dev.left.Load() {
		t.Fatalf("SIGTERM, in use unknown: removed %v, left for recovery %v", dev.removed.Load(), dev.left.Load())
	}
}

type detachCounter struct {
	fakeAttached
	n atomic.Int32
}

func (d *detachCounter) Detach(context.Context, bool) error { d.n.Add(1); return nil }

// TestFailedRecoveryKeepsDeviceInUse: a left ublk device whose recovery
// failed is removed only when nothing uses it: mounted in another mount
// namespace it stays (and the attach fails naming it); a path that is no
// block device (the check cannot be made) stays too; an unused one is
// removed.
func TestFailedRecoveryKeepsDeviceInUse(t *testing.T) {
	signalEnv(t)
	recErr := errors.New("START_USER_RECOVERY: no such device state")
	removed := 0
	remove := func(context.Context, int) error { removed++; return nil }
	dev := looptest.Device(t)
	end := looptest.MountElsewhere(t, dev)
	err := afterFailedRecovery(context.Background(), "db", dev, 7, recErr, remove)
	if err == nil || !strings.Contains(err.Error(), "in use") || !errors.Is(err, recErr) || removed != 0 {
		t.Fatalf("mounted in another namespace: %v, removed %d times", err, removed)
	}
	notBlock := filepath.Join(t.TempDir(), "ublkb7")
	if err := os.WriteFile(notBlock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := afterFailedRecovery(context.Background(), "db", notBlock, 7, recErr, remove); err == nil || removed != 0 {
		t.Fatalf("check impossible: %v, removed %d times", err, removed)
	}
	end()
	if err := afterFailedRecovery(context.Background(), "db", dev, 7, recErr, remove); err != nil || removed != 1 {
		t.Fatalf("unused: %v, removed %d times", err, removed)
	}
}
