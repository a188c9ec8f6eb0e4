package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/internal/tgttest"
	"github.com/iser-attach/iser-attach/volume"
)

// testDevice stands in for /dev/ublkbN or /dev/nbdN (this host has neither
// driver): its path is a block device node, which a test holds open in
// another process to make it "in use".
type testDevice struct {
	path    string
	removed atomic.Bool
	left    atomic.Bool
}

func (d *testDevice) Path() string { return d.path }

func (d *testDevice) Detach(context.Context) error {
	d.removed.Store(true)
	return nil
}

// testRecoverable is a testDevice that, like ublk, can outlive its server.
type testRecoverable struct{ *testDevice }

func (d testRecoverable) Leave() error {
	d.left.Store(true)
	return nil
}

// racingServer is test-racing's control server.
var racingServer atomic.Pointer[volume.ControlServer]

// attachedDevice is the device the test frontends made last.
var attachedDevice atomic.Pointer[testDevice]

func init() {
	frontends["test-recoverable"] = func(ctx context.Context, sp *attachSpec, b *counting.Backend, l *lunConn) (blockDevice, error) {
		return testRecoverable{attachedDevice.Load()}, nil
	}
	// A server of the same volume that comes up while the device is made:
	// its control socket makes ours fail.
	frontends["test-racing"] = func(ctx context.Context, sp *attachSpec, b *counting.Backend, l *lunConn) (blockDevice, error) {
		srv, err := volume.ListenControl(sp.Volume, &fakeAttached{volume.Status{Name: sp.Volume, Device: "/dev/ublkb9", PID: 4242}})
		if err != nil {
			return nil, err
		}
		racingServer.Store(srv)
		return testRecoverable{attachedDevice.Load()}, nil
	}
	frontends["test-plain"] = func(ctx context.Context, sp *attachSpec, b *counting.Backend, l *lunConn) (blockDevice, error) {
		return attachedDevice.Load(), nil
	}
}

// blockNode makes a block device node (of loop device 7, which nobody
// needs to have bound) in a temporary directory. volume.InUse opens it
// O_EXCL, so the loop driver must answer for it: without, a device that
// cannot be opened counts as in use and the test is skipped.
func blockNode(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "testblk0")
	if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 7))); err != nil {
		t.Fatalf("mknod: %v", err)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_EXCL, 0)
	if err != nil {
		t.Skipf("loop device 7 cannot be opened O_EXCL (%v): volume.InUse would call it in use", err)
	}
	f.Close()
	return p
}

// holdOpen opens dev in another process until the returned func is called.
func holdOpen(t *testing.T, dev string) func() {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec sleep 120 3<"+dev)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	release := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	t.Cleanup(release)
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if busy, _ := volume.InUse(dev); busy {
			return release
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the holder never opened the device")
		}
	}
}

// signalEnv is volumeEnv with the links in a temporary directory, too.
func signalEnv(t *testing.T) {
	t.Helper()
	volumeEnv(t)
	old := volume.LinkDir
	volume.LinkDir = filepath.Join(t.TempDir(), "iser")
	t.Cleanup(func() { volume.LinkDir = old })
}

// attachThenSignal runs attach in this process with a test frontend,
// sends SIGTERM once the device is ready and returns attach's result.
func attachThenSignal(t *testing.T, srv *tgttest.Server, frontend string, dev *testDevice, afterSignal func()) error {
	t.Helper()
	attachedDevice.Store(dev)
	done := make(chan error, 1)
	go func() {
		_, err := runInProcess("attach", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1",
			"--transport", "tcp", "--name", "db", "--frontend", frontend)
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
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if afterSignal != nil {
		afterSignal()
	}
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("attach did not end after SIGTERM")
		return nil
	}
}

func syncCaches(t *testing.T, srv *tgttest.Server) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return srv.Commands(1, 0x35).Done // SYNCHRONIZE CACHE(10)
}

// SIGTERM (systemctl stop) while a ublk device is mounted or open must not
// remove it under its users: the daemon flushes, leaves the device to the
// next attach (user recovery) and exits 0.
func TestSignalLeavesRecoverableDeviceInUse(t *testing.T) {
	signalEnv(t)
	srv := tgttest.Start(t, tgttest.Target{})
	dev := &testDevice{path: blockNode(t)}
	holdOpen(t, dev.path)
	start := time.Now()
	if err := attachThenSignal(t, srv, "test-recoverable", dev, nil); err != nil {
		t.Fatalf("attach after SIGTERM: %v", err)
	}
	if dev.removed.Load() || !dev.left.Load() {
		t.Fatalf("device in use: removed %v, left for recovery %v", dev.removed.Load(), dev.left.Load())
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v to leave the device", d)
	}
	if n := syncCaches(t, srv); n == 0 {
		t.Error("no SYNCHRONIZE CACHE before leaving the device")
	}
	// The lock is free for the next attach, which takes the device over.
	l, err := volume.AcquireLock("db")
	if err != nil {
		t.Fatalf("lock after the daemon left: %v", err)
	}
	l.Close()
}

// Not in use (systemd stops volumes after unmounting at shutdown), the
// device is removed as before.
func TestSignalRemovesUnusedDevice(t *testing.T) {
	signalEnv(t)
	srv := tgttest.Start(t, tgttest.Target{})
	dev := &testDevice{path: blockNode(t)}
	if err := attachThenSignal(t, srv, "test-recoverable", dev, nil); err != nil {
		t.Fatalf("attach after SIGTERM: %v", err)
	}
	if !dev.removed.Load() || dev.left.Load() {
		t.Fatalf("unused device: removed %v, left %v", dev.removed.Load(), dev.left.Load())
	}
}

// A device that cannot outlive its server (kernel NBD) is served while it
// is in use and removed only once it is released.
func TestSignalKeepsServingPlainDeviceInUse(t *testing.T) {
	signalEnv(t)
	srv := tgttest.Start(t, tgttest.Target{})
	dev := &testDevice{path: blockNode(t)}
	release := holdOpen(t, dev.path)
	err := attachThenSignal(t, srv, "test-plain", dev, func() {
		time.Sleep(2 * time.Second)
		if dev.removed.Load() {
			t.Error("removed while in use")
		}
		release()
	})
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if !dev.removed.Load() || dev.left.Load() {
		t.Fatalf("released device: removed %v, left %v", dev.removed.Load(), dev.left.Load())
	}
}

// When attach cannot serve a device it took over (ublk recovery) and the
// device is in use, it leaves it instead of removing it.
func TestAttachFailureLeavesDeviceInUse(t *testing.T) {
	signalEnv(t)
	srv := tgttest.Start(t, tgttest.Target{})
	dev := &testDevice{path: blockNode(t)}
	holdOpen(t, dev.path)
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
		t.Fatalf("device in use: removed %v, left %v", dev.removed.Load(), dev.left.Load())
	}
}
