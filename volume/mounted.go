package volume

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// InUse reports whether the block device at dev, or one of its partitions,
// is in use, and why. Every decision to remove a device without --force
// (detach, a signal, a failed takeover) is this one.
//
// The first checks name where: a mount in this process's mount namespace,
// a holder (device mapper, md), another process with the device open. The
// last is the kernel's own answer, which sees what they cannot (a mount in
// another mount namespace: a container's, a pod's, a unit's with
// PrivateMounts): an O_EXCL open of the device fails with EBUSY while it,
// or a partition, is mounted anywhere, held, or opened O_EXCL by anyone.
//
// It fails closed: when a check cannot be made (the device cannot be
// stat'ed, mountinfo cannot be read, the O_EXCL open fails otherwise or
// does not return within 5 s, as on a quiesced ublk device that must
// read its partition table), the device is in use and the reason says why.
func InUse(dev string) (busy bool, reason string) {
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		return true, fmt.Sprintf("cannot tell, so taken as in use: stat %s: %v", dev, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return true, fmt.Sprintf("cannot tell, so taken as in use: %s is not a block device", dev)
	}
	ids := map[string]bool{devID(st.Rdev): true}
	base := filepath.Base(dev)
	// Partitions: /sys/class/block/DEV/DEVp1/dev.
	parts, _ := filepath.Glob(filepath.Join("/sys/class/block", base, base+"*", "dev"))
	var partNodes []string
	for _, p := range parts {
		if b, err := os.ReadFile(p); err == nil {
			id := strings.TrimSpace(string(b))
			ids[id] = true
			node := filepath.Join(filepath.Dir(dev), filepath.Base(filepath.Dir(p)))
			if sameDevice(node, id) {
				partNodes = append(partNodes, node)
			}
		}
	}
	if where, err := mountedOn(ids); err != nil {
		return true, "cannot tell, so taken as in use: " + err.Error()
	} else if where != "" {
		return true, "mounted on " + where
	}
	holders, _ := filepath.Glob(filepath.Join("/sys/class/block", base, "holders", "*"))
	if len(holders) > 0 {
		return true, "held by " + filepath.Base(holders[0])
	}
	if pid, comm := openedBy(st.Rdev, ids); pid > 0 {
		return true, fmt.Sprintf("open by pid %d (%s)", pid, comm)
	}
	// The kernel marks the whole disk claimed while a partition is, so the
	// whole disk's open answers for them; a partition's node, where one
	// exists, is asked too.
	for _, node := range append([]string{dev}, partNodes...) {
		if busy, reason := claimed(node); busy {
			return true, reason
		}
	}
	return false, ""
}

// mountedOn is the mount point, in this process's mount namespace, of a
// device among ids ("major:minor"), or "".
func mountedOn(ids map[string]bool) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && ids[fields[2]] {
			return fields[4], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("mountinfo: %w", err)
	}
	return "", nil
}

// exclusiveOpenTimeout bounds InUse's O_EXCL open: opening a block device
// can wait for I/O (a partition rescan), which a quiesced ublk device does
// not answer. An open that takes longer means "in use".
var exclusiveOpenTimeout = 5 * time.Second

// openExclusive opens a block device O_EXCL (the kernel claims it for the
// open file); a test replaces it.
var openExclusive = func(path string) (io.Closer, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_EXCL, 0)
}

// claimed reports whether something holds the block device at path
// exclusively, by an O_EXCL open of it (EBUSY); an open that fails
// otherwise, or does not return within exclusiveOpenTimeout, counts as in
// use too.
func claimed(path string) (bool, string) {
	type result struct {
		c   io.Closer
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := openExclusive(path)
		ch <- result{c, err}
	}()
	timer := time.NewTimer(exclusiveOpenTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err == nil {
			r.c.Close()
			return false, ""
		}
		if errors.Is(r.err, syscall.EBUSY) {
			return true, fmt.Sprintf("claimed by another user of the device, e.g. a mount in another mount namespace (an O_EXCL open of %s: %v)", path, syscall.EBUSY)
		}
		return true, fmt.Sprintf("cannot tell, so taken as in use: O_EXCL open: %v", r.err)
	case <-timer.C:
		// The open may still succeed: close what it returns then.
		go func() {
			if r := <-ch; r.err == nil {
				r.c.Close()
			}
		}()
		return true, fmt.Sprintf("cannot tell, so taken as in use: an O_EXCL open of %s did not return within %v", path, exclusiveOpenTimeout)
	}
}

// devID is rdev as "major:minor", as mountinfo and sysfs write it.
func devID(rdev uint64) string {
	major, minor := (rdev>>8)&0xfff, (rdev&0xff)|((rdev>>12)&0xfff00)
	return fmt.Sprintf("%d:%d", major, minor)
}

// sameDevice reports whether path is a block device node for id.
func sameDevice(path, id string) bool {
	var st syscall.Stat_t
	return syscall.Stat(path, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFBLK && devID(st.Rdev) == id
}

// openedBy finds a process other than this one with the device (rdev) or
// one of its partitions (ids, "major:minor") open, by its /proc/PID/fd.
// Processes it may not look at are skipped.
func openedBy(rdev uint64, ids map[string]bool) (int, string) {
	self := os.Getpid()
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		pidDir := filepath.Dir(filepath.Dir(fd))
		pid, err := strconv.Atoi(filepath.Base(pidDir))
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
			continue
		}
		if st.Rdev != rdev && !ids[devID(st.Rdev)] {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(pidDir, "comm"))
		return pid, strings.TrimSpace(string(comm))
	}
	return 0, ""
}
