package nbdkernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/iser-attach/iser-attach/internal/proc"
)

// A device a server left: the server died (SIGKILL, a crash) without
// NBD_CMD_DISCONNECT. The kernel keeps such a device configured, its
// sockets dead, its I/O failing once the dead-connection timeout ends,
// until someone disconnects it: nothing can attach /dev/nbdN meanwhile.
// The kernel shows a configured device's server in sysfs: pid (the task
// that sent NBD_CMD_CONNECT; the file exists only while the device is
// configured) and backend (Options.BackendID).

// sysBlock is where sysfs shows block devices; tests point it elsewhere.
var sysBlock = "/sys/block"

// ErrServed is wrapped when the process that configured a device is alive:
// the device is not removed.
var ErrServed = errors.New("device is served by a live process")

// ErrHeldOpen is wrapped when a disconnected device stays configured: the
// kernel frees it when its last opener (a mount, a process) closes it.
var ErrHeldOpen = errors.New("device disconnected but still held open")

// Configured reports whether /dev/nbdIndex is configured with backend
// identifier backend: the device a server of that backend attached,
// alive or not.
func Configured(index int, backend string) bool {
	_, b, ok := configuredBy(sysBlock, index)
	return ok && b == backend
}

// configuredBy reads the server's pid and the backend identifier of
// nbdIndex from sys; ok is false when the device is not configured.
func configuredBy(sys string, index int) (pid int, backend string, ok bool) {
	dir := filepath.Join(sys, "nbd"+strconv.Itoa(index))
	p, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0, "", false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(p)))
	if err != nil {
		pid = -1 // configured, by a server we cannot name: treated as alive
	}
	b, _ := os.ReadFile(filepath.Join(dir, "backend"))
	return pid, strings.TrimSpace(string(b)), true
}

// Remove disconnects /dev/nbdIndex, which a server that is gone left
// configured with backend identifier backend: I/O it holds fails. It
// refuses (ErrServed) while the process that configured it lives, or
// when sysfs does not name it, and a device another backend configured.
// A device someone still holds open stays configured until they close it:
// Remove waits for that until ctx ends, then returns ErrHeldOpen.
func Remove(ctx context.Context, index int, backend string) error {
	return remove(ctx, netlinkTransport{}, sysBlock, index, backend)
}

func remove(ctx context.Context, tr transport, sys string, index int, backend string) error {
	dev := DevicePath(index)
	pid, b, ok := configuredBy(sys, index)
	if !ok {
		return nil // gone already
	}
	if b != backend {
		return fmt.Errorf("nbd remove %s: configured by %q, not %q", dev, b, backend)
	}
	if pid == -1 || proc.Alive(pid) {
		return fmt.Errorf("nbd remove %s: %w: pid %d configured it", dev, ErrServed, pid)
	}
	cl, err := dial(ctx, tr)
	if err != nil {
		return fmt.Errorf("nbd remove %s: %w", dev, err)
	}
	if err := cl.disconnect(ctx, index); err != nil {
		return fmt.Errorf("nbd remove %s: %w", dev, err)
	}
	if err := cl.waitUnbound(ctx, index); err != nil {
		return fmt.Errorf("nbd remove %s: %w", dev, err)
	}
	return nil
}

// DevicePath is the block device of nbd device index.
func DevicePath(index int) string { return "/dev/nbd" + strconv.Itoa(index) }
