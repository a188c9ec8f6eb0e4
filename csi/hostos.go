package csi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/volume"
)

// HostOS is the real NodeOS: the Attacher given, mount(2), statfs(2), and
// blkid, mkfs.ext4, mkfs.xfs, resize2fs and xfs_growfs from PATH.
type HostOS struct {
	Attacher
	// MountInfo is /proc/self/mountinfo; tests change it.
	MountInfo string
}

// NewHostOS is the real NodeOS attaching through a.
func NewHostOS(a Attacher) *HostOS { return &HostOS{Attacher: a, MountInfo: "/proc/self/mountinfo"} }

// InUse is volume.InUse, the rule detach honours.
func (h *HostOS) InUse(device string) (bool, string) { return volume.InUse(device) }

// run runs a tool and returns its output; an error names the command and
// ends with the tool's own last error line ("NAME: ...": the tools print
// progress on stdout and their error on stderr, so the combined output's
// last line may be progress), else the last line of its output.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, toolError(name, out))
	}
	return out, nil
}

// toolError is the last line of out that starts with "NAME:", else its
// last line.
func toolError(name string, out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], name+":") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

// FSType asks blkid (probing the device itself, not its cache); blkid's
// exit status 2 is "nothing found".
func (h *HostOS) FSType(ctx context.Context, device string) (string, error) {
	out, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "value", "-s", "TYPE", device).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("blkid %s: %w", device, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Mkfs makes an ext4 or xfs filesystem on device.
func (h *HostOS) Mkfs(ctx context.Context, device, fsType string) error {
	var err error
	switch fsType {
	case "ext4":
		_, err = run(ctx, "mkfs.ext4", "-q", "-F", "-E", "nodiscard", device)
	case "xfs":
		_, err = run(ctx, "mkfs.xfs", "-q", "-K", device)
	default:
		err = fmt.Errorf("mkfs %s: filesystem %q not supported", device, fsType)
	}
	return err
}

// Mount mounts with mount(2); a read-only bind mount is a bind mount
// remounted read-only (the kernel ignores MS_RDONLY on the bind itself).
func (h *HostOS) Mount(source, target, fsType string, bind, readOnly bool) error {
	if bind {
		if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
		}
		if readOnly {
			if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				_ = unix.Unmount(target, 0)
				return fmt.Errorf("remount %s read-only: %w", target, err)
			}
		}
		return nil
	}
	var flags uintptr
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(source, target, fsType, flags, ""); err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", source, fsType, target, err)
	}
	return nil
}

// Unmount unmounts target (umount2 without flags: a busy mount fails).
func (h *HostOS) Unmount(target string) error {
	if err := unix.Unmount(target, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// MountPoint says whether path is a mount point in h.MountInfo.
func (h *HostOS) MountPoint(path string) (bool, error) {
	b, err := os.ReadFile(h.MountInfo)
	if err != nil {
		return false, fmt.Errorf("read mounts: %w", err)
	}
	path = filepath.Clean(path)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == path {
			return true, nil
		}
	}
	return false, nil
}

// Stats is statfs(2) of path.
func (h *HostOS) Stats(path string) (VolumeStats, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return VolumeStats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := int64(s.Bsize)
	return VolumeStats{
		Bytes: int64(s.Blocks) * bs, BytesAvailable: int64(s.Bavail) * bs, BytesUsed: int64(s.Blocks-s.Bfree) * bs,
		Inodes: int64(s.Files), InodesFree: int64(s.Ffree), InodesUsed: int64(s.Files - s.Ffree),
	}, nil
}

// DeviceSize is the block device's size: where a seek to its end lands.
func (h *HostOS) DeviceSize(device string) (int64, error) {
	f, err := os.Open(device)
	if err != nil {
		return 0, fmt.Errorf("device size: %w", err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("device size of %s: %w", device, err)
	}
	return size, nil
}

// GrowFS grows an ext4 filesystem (resize2fs, online) or an xfs one
// (xfs_growfs on its mount point).
func (h *HostOS) GrowFS(ctx context.Context, device, path, fsType string) error {
	var err error
	switch fsType {
	case "ext4":
		_, err = run(ctx, "resize2fs", device)
		if err != nil && strings.Contains(err.Error(), "Permission denied") {
			// ext4's online resize ioctls need CAP_SYS_RESOURCE, which
			// an unprivileged container (or a host like CI's) lacks.
			err = fmt.Errorf("%w (online resize of ext4 needs CAP_SYS_RESOURCE)", err)
		}
	case "xfs":
		_, err = run(ctx, "xfs_growfs", path)
	default:
		err = fmt.Errorf("grow %s: filesystem %q not supported", device, fsType)
	}
	return err
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
