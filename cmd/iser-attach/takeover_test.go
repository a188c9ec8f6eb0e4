package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/looptest"
	nbdkernel "github.com/iser-attach/iser-attach/nbd/kernel"
	"github.com/iser-attach/iser-attach/ublk"
	"github.com/iser-attach/iser-attach/volume"
)

// A ublk device a SIGTERM left quiesced (and mounted) blocks an attach of
// the volume with another frontend, before any login: that attach would
// open a second device on the same LUN.
func TestAttachRefusesOtherFrontendOverLeftDevice(t *testing.T) {
	volumeEnv(t)
	exists := true
	old := leftDeviceExists
	leftDeviceExists = func(id int) bool { return id == 3 && exists }
	t.Cleanup(func() { leftDeviceExists = old })
	if err := volume.WriteState("db", volume.State{Frontend: "ublk", ID: 3, Device: "/dev/ublkb3", PID: 99,
		LUN: volume.Identity{WWN: "naa.1", Size: 1 << 20, BlockSize: 512}}); err != nil {
		t.Fatal(err)
	}
	portal, logins := countingPortal(t)
	attach := []string{"attach", "--portal", portal, "--target", "iqn.2026-11.test:disk", "--lun", "1",
		"--transport", "tcp", "--name", "db", "--frontend", "test-plain"}
	want := "volume db: /dev/ublkb3, left by a previous server of the volume, still exists; --frontend test-plain would open a second device on the same LUN: " +
		"attach the volume with the ublk frontend to take it over (then `iser-attach detach db`, with --force if it is in use, removes it)"
	_, err := runInProcess(attach...)
	if err == nil || err.Error() != want {
		t.Fatalf("attach over a left device:\n got %v\nwant %s", err, want)
	}
	if n := logins.Load(); n != 0 {
		t.Fatalf("connected to the portal %d times before refusing", n)
	}
	// Gone (removed, or a reboot), the record stops nothing: this attach
	// goes on to log in (and fails there, the portal closing at once).
	exists = false
	_, err = runInProcess(attach...)
	if err == nil || strings.Contains(err.Error(), "still exists") || logins.Load() == 0 {
		t.Fatalf("attach with the device gone: %v (%d logins)", err, logins.Load())
	}
}

// leftDeviceEnv records a ublk device (id 3) left by a stopped daemon of
// volume db, shown by the block device dev; it returns how many times
// detach removed it.
func leftDeviceEnv(t *testing.T, dev string) *int {
	t.Helper()
	removed := new(int)
	oldExists, oldPath, oldRemove := leftDeviceExists, leftDevicePath, removeLeftDevice
	leftDeviceExists = func(id int) bool { return id == 3 && *removed == 0 }
	leftDevicePath = func(id int) string { return dev }
	removeLeftDevice = func(_ context.Context, id int) error {
		if id != 3 {
			t.Errorf("removed ublk device %d, not 3", id)
		}
		*removed++
		return nil
	}
	t.Cleanup(func() { leftDeviceExists, leftDevicePath, removeLeftDevice = oldExists, oldPath, oldRemove })
	if err := volume.WriteState("db", volume.State{Frontend: "ublk", ID: 3, Device: "/dev/ublkb3", PID: 99,
		LUN: volume.Identity{WWN: "naa.1", Size: 1 << 20, BlockSize: 512}}); err != nil {
		t.Fatal(err)
	}
	return removed
}

// A daemon stopped while its ublk device was in use left it quiesced, and
// no daemon answers for the volume: detach removes that device once
// nothing uses it. While it is mounted in another mount namespace, only
// --force removes it. Before, detach said the volume was not attached and
// the device stayed until a reboot or a takeover.
func TestDetachRemovesLeftDevice(t *testing.T) {
	volumeEnv(t)
	dev := looptest.Device(t)
	end := looptest.MountElsewhere(t, dev)
	removed := leftDeviceEnv(t, dev)
	_, err := runInProcess("detach", "db")
	want := "db (" + dev + "), left by a previous server of the volume, is in use (" + claimedReason
	if err == nil || !strings.HasPrefix(err.Error(), want) || *removed != 0 {
		t.Fatalf("detach of a left device mounted elsewhere: %v (removed %d times)\nwant prefix %s", err, *removed, want)
	}
	if _, ok := volume.ReadState("db"); !ok {
		t.Fatal("refused detach forgot the volume's state")
	}
	// An attach holding the volume's lock (taking the device over) makes
	// detach fail rather than remove the device under it.
	lock, err := volume.AcquireLock("db")
	if err != nil {
		t.Fatal(err)
	}
	end()
	_, err = runInProcess("detach", "--force", "db")
	var held *volume.AttachedError
	if !errors.As(err, &held) || *removed != 0 {
		t.Fatalf("detach --force while an attach holds the lock: %v (removed %d times)", err, *removed)
	}
	lock.Close()
	err = detachOnceUnmounted("db")
	if err != nil || *removed != 1 {
		t.Fatalf("detach of a left device nothing uses: %v (removed %d times)", err, *removed)
	}
	checkForgotten(t, "db")
}

// detachOnceUnmounted runs detach NAME until it succeeds, for up to 10 s:
// the kernel unmounts a moment after a mount namespace ends. It returns
// the last error.
func detachOnceUnmounted(name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := runInProcess("detach", name)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkForgotten checks that a removed left device's volume is gone: no
// state recorded, and a second detach finds nothing.
func checkForgotten(t *testing.T, name string) {
	t.Helper()
	if _, ok := volume.ReadState(name); ok {
		t.Fatal("the removed device's state is still recorded")
	}
	if _, err := runInProcess("detach", name); err == nil || err.Error() != `no attached volume named or at "`+name+`"` {
		t.Fatalf("second detach: %v", err)
	}
}

// --force removes a left device even while it is mounted elsewhere (the
// I/O it holds fails); a removal the driver refuses is reported and the
// state kept.
func TestDetachForceRemovesLeftDeviceInUse(t *testing.T) {
	volumeEnv(t)
	dev := looptest.Device(t)
	looptest.MountElsewhere(t, dev)
	removed := leftDeviceEnv(t, dev)
	fail := removeLeftDevice
	removeLeftDevice = func(context.Context, int) error {
		return fmt.Errorf("ublk remove dev 3: %w", ublk.ErrServed)
	}
	_, err := runInProcess("detach", "--force", "db")
	if err == nil || !errors.Is(err, ublk.ErrServed) || !strings.HasPrefix(err.Error(), "detach db: remove "+dev+", left by a previous server") {
		t.Fatalf("detach --force with the removal refused: %v", err)
	}
	if _, ok := volume.ReadState("db"); !ok {
		t.Fatal("failed removal forgot the volume's state")
	}
	removeLeftDevice = fail
	if _, err := runInProcess("detach", "--force", "db"); err != nil || *removed != 1 {
		t.Fatalf("detach --force of a left device in use: %v (removed %d times)", err, *removed)
	}
}

// leftNBDEnv records a kernel NBD device (index 3) that a crashed daemon
// of volume db left configured, shown by the block device dev. removeErr,
// when set, is what the removal returns (it still counts as a
// disconnect). It returns how many times the device was disconnected.
func leftNBDEnv(t *testing.T, dev string, removeErr *error) *int {
	t.Helper()
	disconnects := new(int)
	configured := true
	oldConf, oldPath, oldRemove := leftNBDConfigured, leftNBDPath, removeLeftNBD
	leftNBDConfigured = func(index int, backend string) bool {
		return index == 3 && backend == "iser-attach:db" && configured
	}
	leftNBDPath = func(int) string { return dev }
	removeLeftNBD = func(_ context.Context, index int, backend string) error {
		if index != 3 || backend != "iser-attach:db" {
			t.Errorf("disconnected nbd%d of backend %q, not nbd3 of iser-attach:db", index, backend)
		}
		*disconnects++
		if removeErr != nil && *removeErr != nil {
			return *removeErr
		}
		configured = false
		return nil
	}
	t.Cleanup(func() { leftNBDConfigured, leftNBDPath, removeLeftNBD = oldConf, oldPath, oldRemove })
	if err := volume.WriteState("db", volume.State{Frontend: "nbd", ID: 3, Device: "/dev/nbd3", PID: 99,
		LUN: volume.Identity{WWN: "naa.1", Size: 1 << 20, BlockSize: 512}}); err != nil {
		t.Fatal(err)
	}
	return disconnects
}

// A kernel NBD device whose daemon was killed stays configured (the
// kernel waits for a disconnect): detach with no daemon answering
// disconnects it, once nothing uses it. Before, detach said the volume was
// not attached and the device stayed until `nbd-client -d`.
func TestDetachRemovesLeftNBDDevice(t *testing.T) {
	volumeEnv(t)
	dev := looptest.Device(t)
	end := looptest.MountElsewhere(t, dev)
	disconnects := leftNBDEnv(t, dev, nil)
	_, err := runInProcess("detach", "db")
	want := "db (" + dev + "), left by a previous server of the volume, is in use (" + claimedReason
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "); unmount it first, or use --force") || *disconnects != 0 {
		t.Fatalf("detach of a left nbd device mounted elsewhere: %v (%d disconnects)\nwant prefix %s", err, *disconnects, want)
	}
	end()
	err = detachOnceUnmounted("db")
	if err != nil || *disconnects != 1 {
		t.Fatalf("detach of a left nbd device nothing uses: %v (%d disconnects)", err, *disconnects)
	}
	checkForgotten(t, "db")
}

// With --force a left nbd device in use is disconnected: the kernel keeps
// it until its last user closes it, and detach says so rather than fail.
// Without --force a device found still open after the disconnect (used in
// a way the in-use check missed) is an error, and the state stays for a
// later detach; so is a device whose configuring process lives.
func TestDetachForceDisconnectsLeftNBDDeviceInUse(t *testing.T) {
	volumeEnv(t)
	dev := looptest.Device(t)
	var removeErr error
	disconnects := leftNBDEnv(t, dev, &removeErr)

	removeErr = fmt.Errorf("nbd remove /dev/nbd3: %w: pid 7 configured it", nbdkernel.ErrServed)
	if _, err := runInProcess("detach", "--force", "db"); !errors.Is(err, nbdkernel.ErrServed) {
		t.Fatalf("detach --force of a device a live process configured: %v", err)
	}
	removeErr = fmt.Errorf("nbd remove /dev/nbd3: %w (mounted, or open in a process)", nbdkernel.ErrHeldOpen)
	if _, err := runInProcess("detach", "db"); !errors.Is(err, nbdkernel.ErrHeldOpen) {
		t.Fatalf("detach of a device still open after the disconnect: %v", err)
	}
	if _, ok := volume.ReadState("db"); !ok {
		t.Fatal("a failed removal forgot the volume's state")
	}
	looptest.MountElsewhere(t, dev)
	if _, err := runInProcess("detach", "--force", "db"); err != nil || *disconnects != 3 {
		t.Fatalf("detach --force of a left nbd device in use: %v (%d disconnects)", err, *disconnects)
	}
	if _, ok := volume.ReadState("db"); ok {
		t.Fatal("the disconnected device's state is still recorded")
	}
}

// An attach of the volume first disconnects the nbd device a killed
// daemon left, unless it is in use: then it stays (and the attach goes on
// with another device).
func TestAttachReleasesLeftNBDDevice(t *testing.T) {
	volumeEnv(t)
	dev := looptest.Device(t)
	end := looptest.MountElsewhere(t, dev)
	disconnects := leftNBDEnv(t, dev, nil)
	releaseLeftNBD(context.Background(), "db")
	if _, ok := volume.ReadState("db"); !ok || *disconnects != 0 {
		t.Fatalf("a left nbd device in use: %d disconnects, state kept %v; want none, true", *disconnects, ok)
	}
	end()
	deadline := time.Now().Add(10 * time.Second)
	for *disconnects == 0 && time.Now().Before(deadline) {
		releaseLeftNBD(context.Background(), "db")
		time.Sleep(100 * time.Millisecond)
	}
	if _, ok := volume.ReadState("db"); ok || *disconnects != 1 {
		t.Fatalf("a left nbd device nothing uses: %d disconnects, state kept %v; want 1, false", *disconnects, ok)
	}
	// A ublk record is not ours to release.
	leftDeviceEnv(t, dev)
	releaseLeftNBD(context.Background(), "db")
	if st, ok := volume.ReadState("db"); !ok || st.Frontend != "ublk" || *disconnects != 1 {
		t.Fatalf("releaseLeftNBD with a ublk record: state %+v %v, %d disconnects", st, ok, *disconnects)
	}
}
