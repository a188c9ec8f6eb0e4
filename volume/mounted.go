package volume

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// InUse reports whether the block device at dev (or one of its partitions)
// is mounted, or held by another device (device mapper, md), and says where.
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
	return false, "", nil
}
