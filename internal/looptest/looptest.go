// Package looptest gives host tests a real block device, a loop device
// over a file, and a filesystem on it mounted only inside another mount
// namespace (unshare -m --propagation private: what a container, a pod or
// a unit with PrivateMounts has). Tests that need them are skipped where
// they cannot be had (not root, no loop driver, no util-linux).
package looptest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// avoid is the loop device the cmd tests' device nodes name (major 7,
// minor 7): a test mounting it would make theirs in use.
const avoid = "/dev/loop7"

// Device binds a 32 MiB file to a free loop device for the test's life.
func Device(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (losetup, mount)")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	var held []string
	defer func() {
		for _, d := range held {
			_ = exec.Command("losetup", "-d", d).Run()
		}
	}()
	for range 3 {
		img := filepath.Join(t.TempDir(), "disk.img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 32<<20); err != nil {
			t.Fatal(err)
		}
		b, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
		if err != nil {
			t.Skipf("no loop device: losetup: %v: %s", err, strings.TrimSpace(string(b)))
		}
		dev := strings.TrimSpace(string(b))
		if dev == avoid {
			held = append(held, dev)
			continue
		}
		t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
		return dev
	}
	t.Skip("no free loop device but " + avoid)
	return ""
}

// MountElsewhere makes an ext4 file system on dev and mounts it in a new
// private mount namespace, kept by a sleeping process; this process's
// namespace does not see the mount. end kills that process, and with it
// the namespace and the mount (the kernel unmounts it soon after); the
// test's cleanup calls it too.
func MountElsewhere(t testing.TB, dev string) (end func()) {
	t.Helper()
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", dev, err, out)
	}
	ns := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount "$1" "$2" && echo mounted && exec sleep 600`, "sh", dev, t.TempDir())
	out, err := ns.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ns.Stderr = os.Stderr
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	ended := false
	end = func() {
		if !ended {
			ended = true
			_ = ns.Process.Kill()
			_ = ns.Wait()
		}
	}
	t.Cleanup(end)
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "mounted\n" {
		end()
		t.Fatalf("mount %s in a new mount namespace: %q %v", dev, line, err)
	}
	return end
}
