package volume

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/internal/looptest"
)

// fakeClaim replaces the O_EXCL open for one test.
func fakeClaim(t *testing.T, open func(string) (io.Closer, error)) {
	t.Helper()
	old := openExclusive
	openExclusive = open
	t.Cleanup(func() { openExclusive = old })
}

type closeCounter struct{ n *atomic.Int32 }

func (c closeCounter) Close() error { c.n.Add(1); return nil }

// The O_EXCL open decides, and every way it fails but one (nobody else
// holds the device) means in use.
func TestClaimed(t *testing.T) {
	oldTimeout := exclusiveOpenTimeout
	exclusiveOpenTimeout = 200 * time.Millisecond
	t.Cleanup(func() { exclusiveOpenTimeout = oldTimeout })
	for _, tc := range []struct {
		name   string
		err    error
		hang   bool
		busy   bool
		reason string
	}{
		{name: "free", busy: false},
		{name: "claimed", err: &os.PathError{Op: "open", Path: "/dev/x", Err: syscall.EBUSY}, busy: true,
			reason: "claimed by another user of the device, e.g. a mount in another mount namespace (an O_EXCL open of /dev/x: device or resource busy)"},
		{name: "gone", err: &os.PathError{Op: "open", Path: "/dev/x", Err: syscall.ENXIO}, busy: true,
			reason: "cannot tell, so taken as in use: O_EXCL open: open /dev/x: no such device or address"},
		{name: "denied", err: &os.PathError{Op: "open", Path: "/dev/x", Err: syscall.EACCES}, busy: true,
			reason: "cannot tell, so taken as in use: O_EXCL open: open /dev/x: permission denied"},
		{name: "hangs", hang: true, busy: true,
			reason: "cannot tell, so taken as in use: an O_EXCL open of /dev/x did not return within 200ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var closed atomic.Int32
			release := make(chan struct{})
			returned := make(chan struct{})
			fakeClaim(t, func(string) (io.Closer, error) {
				if tc.hang {
					<-release
					defer close(returned)
				}
				if tc.err != nil {
					return nil, tc.err
				}
				return closeCounter{&closed}, nil
			})
			busy, reason := claimed("/dev/x")
			if busy != tc.busy || reason != tc.reason {
				t.Fatalf("claimed: %v %q, want %v %q", busy, reason, tc.busy, tc.reason)
			}
			if tc.hang {
				// The open that returns late is closed then.
				close(release)
				<-returned
				for start := time.Now(); closed.Load() == 0 && time.Since(start) < 5*time.Second; {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if n := closed.Load(); tc.err == nil && n != 1 {
				t.Fatalf("the device was closed %d times, want once", n)
			}
		})
	}
}

// InUse asks the kernel last: a device nothing here names (no mount in
// this namespace, no holder, no other process with it open) is in use
// when its O_EXCL open fails.
func TestInUseAsksForExclusiveOpen(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "testblk0")
	if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 201))); err != nil {
		t.Skipf("mknod: %v", err)
	}
	var asked []string
	fakeClaim(t, func(p string) (io.Closer, error) {
		asked = append(asked, p)
		return nil, &os.PathError{Op: "open", Path: p, Err: syscall.EBUSY}
	})
	busy, reason := InUse(dev)
	if !busy || !strings.Contains(reason, "claimed by another user of the device") {
		t.Fatalf("InUse: %v %q", busy, reason)
	}
	if len(asked) != 1 || asked[0] != dev {
		t.Fatalf("opened %q, want %q", asked, dev)
	}
	fakeClaim(t, func(p string) (io.Closer, error) { return io.NopCloser(nil), nil })
	if busy, reason := InUse(dev); busy {
		t.Fatalf("free device: in use (%s)", reason)
	}
}

// A check that cannot be made says "in use", with the reason.
func TestInUseFailsClosed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dev, reason string }{
		{filepath.Join(dir, "missing"), "cannot tell, so taken as in use: stat " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{file, "cannot tell, so taken as in use: " + file + " is not a block device"},
	} {
		if busy, reason := InUse(tc.dev); !busy || reason != tc.reason {
			t.Errorf("InUse(%s): %v %q, want in use, %q", tc.dev, busy, reason, tc.reason)
		}
	}
}

// The case that lost data: a filesystem mounted only inside another mount
// namespace (unshare -m --propagation private, as a container or a unit
// with PrivateMounts has) on a loop device. This namespace's mountinfo
// does not show it; InUse must still say in use.
func TestInUseMountInOtherNamespace(t *testing.T) {
	dev := looptest.Device(t)
	if busy, reason := InUse(dev); busy {
		t.Fatalf("fresh loop device %s in use: %s", dev, reason)
	}
	end := looptest.MountElsewhere(t, dev)
	if where, err := mountedOn(map[string]bool{devIDOf(t, dev): true}); err != nil || where != "" {
		t.Fatalf("this namespace sees the mount (%q, %v): the test proves nothing", where, err)
	}
	busy, reason := InUse(dev)
	if !busy || !strings.Contains(reason, "claimed by another user of the device, e.g. a mount in another mount namespace") {
		t.Fatalf("mounted in another namespace: InUse %v %q", busy, reason)
	}
	// The namespace's last process gone, the mount is too.
	end()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		busy, reason := InUse(dev)
		if !busy {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("still in use after the namespace ended: %s", reason)
		}
	}
}

func devIDOf(t *testing.T, dev string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	return devID(st.Rdev)
}
