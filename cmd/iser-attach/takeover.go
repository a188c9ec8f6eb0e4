package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	nbdkernel "github.com/iser-attach/iser-attach/nbd/kernel"
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

// leftNBDConfigured, leftNBDPath and removeLeftNBD are the same for a
// kernel NBD device a server left configured (SIGKILL, a crash): whether
// it still is, with the volume's backend identifier; its block device;
// its NBD_CMD_DISCONNECT (refused while the process that configured it
// lives). Tests replace them.
var (
	leftNBDConfigured = nbdkernel.Configured
	leftNBDPath       = nbdkernel.DevicePath
	removeLeftNBD     = nbdkernel.Remove
)

// nbdBackendID is the backend identifier a volume's kernel NBD device is
// configured with (sysfs shows it as /sys/block/nbdN/backend): how a later
// process tells the volume's device from any other.
func nbdBackendID(name string) string { return "iser-attach:" + name }

// nbdRemoveTimeout bounds the wait for a disconnected NBD device to be
// freed (it is not while a mount or a process holds it).
const nbdRemoveTimeout = 10 * time.Second

// leftDevice is a device a previous server of a volume left behind.
type leftDevice struct {
	path   string
	remove func(context.Context) error
}

// leftDeviceOf returns the device st records for volume name if it still
// exists as that server left it: a ublk device (quiesced, or dead), a
// kernel NBD device still configured with the volume's backend.
func leftDeviceOf(name string, st volume.State) (leftDevice, bool) {
	switch st.Frontend {
	case "ublk":
		if !leftDeviceExists(st.ID) {
			return leftDevice{}, false
		}
		return leftDevice{path: leftDevicePath(st.ID), remove: func(ctx context.Context) error {
			return removeLeftDevice(ctx, st.ID)
		}}, true
	case "nbd":
		if !leftNBDConfigured(st.ID, nbdBackendID(name)) {
			return leftDevice{}, false
		}
		return leftDevice{path: leftNBDPath(st.ID), remove: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, nbdRemoveTimeout)
			defer cancel()
			return removeLeftNBD(ctx, st.ID, nbdBackendID(name))
		}}, true
	}
	return leftDevice{}, false
}

// detachLeftDevice is detach for a volume no daemon serves any more whose
// device a previous server left: a ublk device quiesced by a SIGTERM while
// it was in use or by a crash, a kernel NBD device still configured after
// a crash. The device is removed, its state and links with it. ok is
// false when name records no such device, and detach reports the volume
// not attached. Without force, a device in use (in any mount namespace,
// or when that cannot be told) stays; with force, I/O it holds fails (a
// kernel NBD device held open is disconnected, and freed by the kernel
// when its last user closes it). msg says what was done.
//
// It holds the volume's attach lock throughout, so an attach taking the
// device over meanwhile makes it fail (naming that attach) rather than
// remove the device under it.
func detachLeftDevice(ctx context.Context, name string, force bool) (ok bool, msg string, err error) {
	st, found := volume.ReadState(name)
	if !found {
		return false, "", nil
	}
	left, found := leftDeviceOf(name, st)
	if !found {
		return false, "", nil
	}
	dev := left.path
	lock, err := volume.AcquireLock(name)
	if err != nil {
		return true, "", fmt.Errorf("detach %s: %w", name, err)
	}
	defer lock.Close()
	if st2, found := volume.ReadState(name); !found || st2 != st {
		return true, "", fmt.Errorf("detach %s: the volume's device changed while detach looked at it; run detach again", name)
	}
	if !force {
		if busy, where := volume.InUse(dev); busy {
			hint := "attach the volume with the ublk frontend to take it over, "
			if st.Frontend != "ublk" {
				hint = ""
			}
			return true, "", fmt.Errorf("%s (%s), left by a previous server of the volume, is in use (%s); unmount it first, "+
				"%sor use --force (the I/O it holds then fails)", name, dev, where, hint)
		}
	}
	msg = fmt.Sprintf("removed %s (%s), left by a previous server of the volume", name, dev)
	if err := left.remove(ctx); err != nil {
		if !force || !errors.Is(err, nbdkernel.ErrHeldOpen) {
			return true, "", fmt.Errorf("detach %s: remove %s, left by a previous server of the volume: %w", name, dev, err)
		}
		msg = fmt.Sprintf("disconnected %s (%s), left by a previous server of the volume; it is still open, and the kernel frees it when its last user closes it", name, dev)
	}
	volume.RemoveState(name)
	removeLinks(name, dev, st.LUN.WWN)
	return true, msg, nil
}
