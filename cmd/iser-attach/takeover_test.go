package main

import (
	"strings"
	"testing"

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
