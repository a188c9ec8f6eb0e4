package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/looptest"
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = runInProcess("detach", "db")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the kernel unmounts a moment after the namespace ends
	}
	if err != nil || *removed != 1 {
		t.Fatalf("detach of a left device nothing uses: %v (removed %d times)", err, *removed)
	}
	if _, ok := volume.ReadState("db"); ok {
		t.Fatal("the removed device's state is still recorded")
	}
	if _, err := runInProcess("detach", "db"); err == nil || err.Error() != `no attached volume named or at "db"` {
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
