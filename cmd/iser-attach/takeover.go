package main

import (
	"context"
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

// leftDevicePath and removeLeftDevice are the block device of a left ublk
// device and its removal (STOP_DEV, DEL_DEV; refused while a live process
// serves it). Tests replace them.
var (
	leftDevicePath   = ublk.BlockPath
	removeLeftDevice = ublk.Remove
)

// detachLeftDevice is detach for a volume no daemon serves any more whose
// ublk device a previous server left quiesced (SIGTERM while it was in
// use, a crash): the device is removed, its state and links with it. ok is
// false when name records no such device, and detach reports the volume
// not attached. Without force, a device in use (in any mount namespace,
// or when that cannot be told) stays; with force, I/O it holds fails.
//
// It holds the volume's attach lock throughout, so an attach taking the
// device over meanwhile makes it fail (naming that attach) rather than
// remove the device under it.
func detachLeftDevice(ctx context.Context, name string, force bool) (ok bool, dev string, err error) {
	st, found := volume.ReadState(name)
	if !found || st.Frontend != "ublk" || !leftDeviceExists(st.ID) {
		return false, "", nil
	}
	dev = leftDevicePath(st.ID)
	lock, err := volume.AcquireLock(name)
	if err != nil {
		return true, dev, fmt.Errorf("detach %s: %w", name, err)
	}
	defer lock.Close()
	if st2, found := volume.ReadState(name); !found || st2 != st {
		return true, dev, fmt.Errorf("detach %s: the volume's device changed while detach looked at it; run detach again", name)
	}
	if !force {
		if busy, where := volume.InUse(dev); busy {
			return true, dev, fmt.Errorf("%s (%s), left by a previous server of the volume, is in use (%s); unmount it first, "+
				"attach the volume with the ublk frontend to take it over, or use --force (the I/O it holds then fails)", name, dev, where)
		}
	}
	if err := removeLeftDevice(ctx, st.ID); err != nil {
		return true, dev, fmt.Errorf("detach %s: remove %s, left by a previous server of the volume: %w", name, dev, err)
	}
	volume.RemoveState(name)
	removeLinks(name, dev, st.LUN.WWN)
	return true, dev, nil
}
