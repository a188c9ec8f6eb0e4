package csi

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// loopAttacher is an Attacher whose volumes are loop devices over sparse
// files: the host kernel has no ublk or NBD, but mkfs, mount, the in-use
// check and the filesystem tools run on a loop device as on ublk.
type loopAttacher struct {
	t    *testing.T
	dir  string
	size int64
	mu   sync.Mutex
	devs map[string]string // name -> /dev/loopN
}

func (l *loopAttacher) file(name string) string { return filepath.Join(l.dir, name+".img") }

func (l *loopAttacher) Attach(ctx context.Context, name string, _ VolumeID, readOnly bool) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d, ok := l.devs[name]; ok {
		return d, nil
	}
	if _, err := os.Stat(l.file(name)); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(l.file(name), nil, 0o600); err != nil {
			return "", err
		}
		if err := os.Truncate(l.file(name), l.size); err != nil {
			return "", err
		}
	}
	args := []string{"--find", "--show"}
	if readOnly {
		args = append(args, "--read-only")
	}
	out, err := run(ctx, "losetup", append(args, l.file(name))...)
	if err != nil {
		return "", err
	}
	d := strings.TrimSpace(string(out))
	l.devs[name] = d
	l.t.Cleanup(func() { exec.Command("losetup", "-d", d).Run() })
	return d, nil
}

func (l *loopAttacher) Detach(ctx context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.devs[name]
	if !ok {
		return nil
	}
	if _, err := run(ctx, "losetup", "-d", d); err != nil {
		return err
	}
	delete(l.devs, name)
	return nil
}

func (l *loopAttacher) Volume(_ context.Context, name string) (AttachedVolume, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.devs[name]
	return AttachedVolume{Device: d, State: "attached"}, ok, nil
}

// Resize grows the backing file by a quarter and has the loop device read
// its size again, as a LUN grown on the target and UPDATE_SIZE would.
func (l *loopAttacher) Resize(ctx context.Context, name string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.size += l.size / 4
	if err := os.Truncate(l.file(name), l.size); err != nil {
		return 0, err
	}
	if _, err := run(ctx, "losetup", "-c", l.devs[name]); err != nil {
		return 0, err
	}
	return l.size, nil
}

// TestHostOSLoop runs the node's kubelet order on the host's kernel through
// the real HostOS, for ext4 and xfs (the lab's LUNs are too small for
// mkfs.xfs): stage makes the filesystem, a pod's publish writes a file, a
// read-only publish refuses writes (EROFS), stats count the file, unstage
// is refused while published, expansion grows the filesystem, and a second
// stage finds the filesystem and the file (no mkfs).
func TestHostOSLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices and mount(2) need root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop driver: ", err)
	}
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			for _, tool := range []string{"losetup", "blkid", "mkfs." + fs} {
				if _, err := exec.LookPath(tool); err != nil {
					t.Fatalf("%s: %v (scripts/deps.sh test installs it)", tool, err)
				}
			}
			dir := t.TempDir()
			la := &loopAttacher{t: t, dir: dir, size: 320 << 20, devs: map[string]string{}}
			hos := NewHostOS(la)
			n, err := NewNode("node-1", hos, filepath.Join(dir, "state"), zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			ctx := context.Background()
			id := testID.String()
			staging, pod, podRO := filepath.Join(dir, "staging"), filepath.Join(dir, "pod", "mount"), filepath.Join(dir, "podro", "mount")
			stage := &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap(fs, rwo)}
			if err := os.Mkdir(staging, 0o750); err != nil {
				t.Fatal(err)
			}
			unmountAll := func() {
				for _, p := range []string{podRO, pod, staging} {
					unix.Unmount(p, unix.MNT_DETACH)
				}
			}
			defer unmountAll()
			if _, err := n.NodeStageVolume(ctx, stage); err != nil {
				t.Fatal(err)
			}
			dev := la.devs[AttachName(n.NodeID, id)]
			if got, err := hos.FSType(ctx, dev); err != nil || got != fs {
				t.Fatalf("after stage blkid says %q, %v; want %s", got, err, fs)
			}
			publish := func(target string, ro bool) {
				t.Helper()
				if _, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
					TargetPath: target, VolumeCapability: fsCap(fs, rwo), Readonly: ro}); err != nil {
					t.Fatalf("publish %s: %v", target, err)
				}
			}
			publish(pod, false)
			publish(podRO, true)
			data := []byte("kept across unstage\n")
			if err := os.WriteFile(filepath.Join(pod, "f"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			unix.Sync()
			if got, err := os.ReadFile(filepath.Join(podRO, "f")); err != nil || string(got) != string(data) {
				t.Fatalf("read-only publish reads %q, %v", got, err)
			}
			if err := os.WriteFile(filepath.Join(podRO, "g"), data, 0o644); !errors.Is(err, unix.EROFS) {
				t.Fatalf("write through the read-only publish: %v; want EROFS", err)
			}
			st, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: pod})
			if err != nil || st.VolumeCondition.Abnormal {
				t.Fatalf("stats = %+v, %v", st, err)
			}
			var bytes0 int64
			for _, u := range st.Usage {
				if u.Unit == csipb.VolumeUsage_BYTES {
					bytes0 = u.Total
				}
			}
			if bytes0 < 200<<20 || bytes0 > 320<<20 {
				t.Fatalf("stats: %d bytes in all on a 320 MiB device", bytes0)
			}
			if _, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err == nil {
				t.Fatal("unstage while published succeeded")
			}
			r, err := n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging,
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 400 << 20}})
			if fs == "ext4" && !hasCap(t, unix.CAP_SYS_RESOURCE) {
				// resize2fs's ioctls answer EPERM: the error says why.
				if err == nil || !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
					t.Fatalf("expand of ext4 without CAP_SYS_RESOURCE = %+v, %v; want an error naming it", r, err)
				}
				t.Logf("ext4 not grown: %v", err)
			} else {
				if err != nil || r.CapacityBytes != 400<<20 {
					t.Fatalf("expand = %+v, %v", r, err)
				}
				var s unix.Statfs_t
				if err := unix.Statfs(staging, &s); err != nil {
					t.Fatal(err)
				}
				if grown := int64(s.Blocks) * int64(s.Bsize); grown < bytes0+60<<20 {
					t.Fatalf("after expanding to 400 MiB the filesystem has %d bytes (before: %d)", grown, bytes0)
				}
			}
			for _, p := range []string{podRO, pod} {
				if _, err := n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p}); err != nil {
					t.Fatalf("unpublish %s: %v", p, err)
				}
			}
			if _, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
				t.Fatal(err)
			}
			if len(la.devs) != 0 {
				t.Fatalf("unstage left %v attached", la.devs)
			}
			// Staged again: the filesystem is found, not made again.
			if _, err := n.NodeStageVolume(ctx, stage); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(staging, "f")); err != nil || string(got) != string(data) {
				t.Fatalf("after a second stage the file reads %q, %v", got, err)
			}
			if _, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// hasCap says whether this process has capability c in its effective set.
func hasCap(t *testing.T, c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return mask&(1<<uint(c)) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

func TestToolError(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"Filesystem at /dev/loop0 is mounted\nresize2fs: Permission denied to resize filesystem\nold_desc_blocks = 3, new_desc_blocks = 4\n",
			"resize2fs: Permission denied to resize filesystem"},
		{"something went wrong\nlast words\n", "last words"},
		{"", ""},
	} {
		if got := toolError("resize2fs", []byte(c.out)); got != c.want {
			t.Errorf("toolError(%q) = %q; want %q", c.out, got, c.want)
		}
	}
}
