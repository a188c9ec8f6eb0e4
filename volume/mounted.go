package volume

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// InUse reports whether the block device at dev (or one of its partitions)
// is mounted, held by another device (device mapper, md) or open in another
// process, and says where.
func InUse(dev string) (bool, string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		return false, "", fmt.Errorf("stat %s: %w", dev, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return false, "", fmt.Errorf("%s is not a block device", dev)
	}
	major, minor := (st.Rdev>>8)&0xfff, (st.Rdev&0xff)|((st.Rdev>>12)&0xfff00)
	ids := map[string]bool{fmt.Sprintf("%d:%d", major, minor): true}
	base := filepath.Base(dev)
	// Partitions: /sys/class/block/DEV/DEVp1/dev.
	parts, _ := filepath.Glob(filepath.Join("/sys/class/block", base, base+"*", "dev"))
	for _, p := range parts {
		if b, err := os.ReadFile(p); err == nil {
			ids[strings.TrimSpace(string(b))] = true
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, "", fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && ids[fields[2]] {
			return true, "mounted on " + fields[4], nil
		}
	}
	holders, _ := filepath.Glob(filepath.Join("/sys/class/block", base, "holders", "*"))
	if len(holders) > 0 {
		return true, "held by " + filepath.Base(holders[0]), nil
	}
	if pid, comm := openedBy(st.Rdev, ids); pid > 0 {
		return true, fmt.Sprintf("open by pid %d (%s)", pid, comm), nil
	}
	return false, "", nil
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
		major, minor := (st.Rdev>>8)&0xfff, (st.Rdev&0xff)|((st.Rdev>>12)&0xfff00)
		if st.Rdev != rdev && !ids[fmt.Sprintf("%d:%d", major, minor)] {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(pidDir, "comm"))
		return pid, strings.TrimSpace(string(comm))
	}
	return 0, ""
}
