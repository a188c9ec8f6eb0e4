package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/iser-attach/iser-attach/ublk"
	"github.com/iser-attach/iser-attach/volume"
)

// leftDeviceExists reports whether the ublk device id still exists: its
// block disk or its char device is in sysfs (a quiesced device keeps
// both). A test replaces it.
var leftDeviceExists = func(id int) bool {
	for _, p := range []string{"/sys/class/block/ublkb" + strconv.Itoa(id), "/sys/class/ublk-char-device/ublkc" + strconv.Itoa(id)} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return false
}

// checkLeftDevice fails when a device a previous server of volume name
// left behind (a ublk device quiesced by SIGTERM or a crash, its I/O
// waiting for the next server) still exists and this attach, with
// frontend, would not take it over: it would open a second device on the
// same LUN, and the quiesced one, taken over or failed later, would write
// its stale pages over newer data. The ublk frontend decides itself
// (recoverUblk: same LUN, not served, in use).
func checkLeftDevice(name, frontend string) error {
	st, ok := volume.ReadState(name)
	if !ok || st.Frontend == frontend || st.Frontend != "ublk" || !leftDeviceExists(st.ID) {
		return nil
	}
	return fmt.Errorf("volume %s: %s, left by a previous server of the volume, still exists; --frontend %s would open a second device on the same LUN: "+
		"attach the volume with the ublk frontend to take it over (then `iser-attach detach %s`, with --force if it is in use, removes it)",
		name, ublk.BlockPath(st.ID), frontend, name)
}
