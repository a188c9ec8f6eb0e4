package ublk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// This file holds the device's I/O scheduler: the kernel gives a disk with
// one hardware queue mq-deadline, and on Linux 7.2 a request inserted into
// a scheduler is dispatched to ublk_drv from a kblockd worker instead of
// the submitting thread (blk_mq_submit_bio runs the hardware queue
// asynchronously), one more thread wake-up per request before the queue
// loop even hears of it. The lab's ublk floor runs at about half the IOPS
// with mq-deadline on 7.2 as with none (docs/fastpath.md).

// SchedulerNone is the I/O scheduler that dispatches each request from
// the thread that submits it: what the CLI gives its devices.
const SchedulerNone = "none"

// sysBlock is where the kernel shows block devices; tests point it
// elsewhere.
var sysBlock = "/sys/block"

// ValidSchedulerName reports whether name can be an I/O scheduler's name
// (what /sys/block/*/queue/scheduler takes): lowercase letters, digits,
// '-' and '_'. Whether this kernel has it is known only when it is set.
func ValidSchedulerName(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// SetScheduler selects the device's I/O scheduler (none, mq-deadline, kyber,
// bfq) and returns the one the kernel then reports as active. The kernel
// refuses a scheduler it does not have (EINVAL); a read-only /sys (a
// container) refuses any: the device then keeps its scheduler, and the
// error says which.
func (d *Device) SetScheduler(name string) (active string, err error) {
	return setScheduler(filepath.Join(sysBlock, "ublkb"+strconv.Itoa(d.id), "queue"), name)
}

// setScheduler writes name to queue's scheduler attribute and reads back
// the active one.
func setScheduler(queue, name string) (string, error) {
	if !ValidSchedulerName(name) {
		return "", fmt.Errorf("ublk scheduler: %q is not a scheduler name", name)
	}
	p := filepath.Join(queue, "scheduler")
	werr := writeAttr(p, name)
	active, rerr := readScheduler(p)
	switch {
	case werr != nil:
		return active, fmt.Errorf("ublk scheduler: set %s to %s: %w", p, name, werr)
	case rerr != nil:
		return "", rerr
	case active != name:
		return active, fmt.Errorf("ublk scheduler: set %s to %s: the kernel reports %q", p, name, active)
	}
	return active, nil
}

// writeAttr writes an existing attribute; it never creates a file.
func writeAttr(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0) // as a shell's redirection, without O_CREAT
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readScheduler reads a scheduler attribute: the kernel lists the
// schedulers it offers with the active one in brackets ("none
// [mq-deadline] kyber"); a queue with a single choice may show it bare.
func readScheduler(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("ublk scheduler: %w", err)
	}
	return activeScheduler(string(b))
}

// activeScheduler is the bracketed name of a scheduler attribute's text,
// or its only word.
func activeScheduler(s string) (string, error) {
	f := strings.Fields(s)
	for _, w := range f {
		if len(w) > 2 && w[0] == '[' && w[len(w)-1] == ']' {
			return w[1 : len(w)-1], nil
		}
	}
	if len(f) == 1 {
		return f[0], nil
	}
	return "", errors.New("ublk scheduler: no active scheduler in " + strconv.Quote(strings.TrimSpace(s)))
}
