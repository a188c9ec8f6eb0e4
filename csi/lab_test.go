package csi

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestLabKubeletOrder drives a running iser-attach csi (the VM lab's
// 85-csi-node: a LIO pool over iSER, where the node can attach) through
// the calls in kubelet's order: create, stage, publish, write, read-only
// publish, stats, unpublish, unstage; staged again the data is there and
// no filesystem is made; then the same for a block volume, and delete.
// It runs only when ISER_CSI_LAB_ENDPOINT names the plugin's socket and
// ISER_CSI_LAB_DIR a directory for staging and target paths.
func TestLabKubeletOrder(t *testing.T) {
	ep, dir := os.Getenv("ISER_CSI_LAB_ENDPOINT"), os.Getenv("ISER_CSI_LAB_DIR")
	if ep == "" || dir == "" {
		t.Skip("ISER_CSI_LAB_ENDPOINT and ISER_CSI_LAB_DIR not set: for the VM lab's 85-csi-node")
	}
	conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, nc := csipb.NewControllerClient(conn), csipb.NewNodeClient(conn)
	rw := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER

	create := func(name string, c *csipb.VolumeCapability) string {
		t.Helper()
		r, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{c},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
		if err != nil {
			t.Fatalf("CreateVolume %s: %v", name, err)
		}
		t.Logf("%s: volume %s, %d bytes", name, r.Volume.VolumeId, r.Volume.CapacityBytes)
		return r.Volume.VolumeId
	}
	stage := func(id, staging string, c *csipb.VolumeCapability) {
		t.Helper()
		start := time.Now()
		if _, err := nc.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c}); err != nil {
			t.Fatalf("NodeStageVolume: %v", err)
		}
		t.Logf("NodeStageVolume took %v", time.Since(start))
	}
	publish := func(id, staging, target string, c *csipb.VolumeCapability, ro bool) {
		t.Helper()
		if _, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
			TargetPath: target, VolumeCapability: c, Readonly: ro}); err != nil {
			t.Fatalf("NodePublishVolume %s: %v", target, err)
		}
	}
	unpublish := func(id, target string) {
		t.Helper()
		if _, err := nc.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatalf("NodeUnpublishVolume %s: %v", target, err)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after unpublish: %v", target, err)
		}
	}
	unstage := func(id, staging string) {
		t.Helper()
		if _, err := nc.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Fatalf("NodeUnstageVolume: %v", err)
		}
	}
	data := make([]byte, 4<<20)
	rand.Read(data)

	// Filesystem mode (ext4).
	fsc := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: rw}}
	id := create("lab-fs", fsc)
	staging := filepath.Join(dir, "staging-fs")
	target, roTarget := filepath.Join(dir, "pod1", "mount"), filepath.Join(dir, "pod2", "mount")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	stage(id, staging, fsc)
	stage(id, staging, fsc) // idempotent
	publish(id, staging, target, fsc, false)
	publish(id, staging, target, fsc, false) // idempotent
	f, err := os.Create(filepath.Join(target, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	publish(id, staging, roTarget, fsc, true)
	if err := os.WriteFile(filepath.Join(roTarget, "x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on the read-only publish: %v; want EROFS", err)
	}
	if b, err := os.ReadFile(filepath.Join(roTarget, "data")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read through the read-only publish: %v", err)
	}
	st, err := nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if st.VolumeCondition.GetAbnormal() || len(st.Usage) != 2 || st.Usage[0].Used < 4<<20 || st.Usage[1].Used == 0 {
		t.Fatalf("stats = %v", st)
	}
	t.Logf("stats: %v", st)
	if _, err := nc.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err == nil {
		t.Fatal("unstage while published succeeded")
	} else {
		t.Logf("unstage while published: %v", err)
	}
	unpublish(id, roTarget)
	unpublish(id, target)
	unpublish(id, target) // idempotent
	unstage(id, staging)
	unstage(id, staging) // idempotent
	// Staged again: the filesystem and the file are kept.
	stage(id, staging, fsc)
	publish(id, staging, target, fsc, false)
	if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the file after unstage and stage again: %v", err)
	}
	unpublish(id, target)
	unstage(id, staging)

	// Block mode.
	bc := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: rw}}
	bid := create("lab-blk", bc)
	bstaging, btarget := filepath.Join(dir, "staging-blk"), filepath.Join(dir, "pod3", "dev", "vol")
	if err := os.MkdirAll(bstaging, 0o750); err != nil {
		t.Fatal(err)
	}
	stage(bid, bstaging, bc)
	publish(bid, bstaging, btarget, bc, false)
	bf, err := os.OpenFile(btarget, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bf.WriteAt(data, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := bf.Sync(); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(data))
	if _, err := bf.ReadAt(back, 1<<20); err != nil || !bytes.Equal(back, data) {
		t.Fatalf("block read back: %v", err)
	}
	bf.Close()
	bst, err := nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: bid, VolumePath: btarget})
	if err != nil || len(bst.Usage) != 1 || bst.Usage[0].Total < 16<<20 || bst.VolumeCondition.GetAbnormal() {
		t.Fatalf("block stats = %v, %v", bst, err)
	}
	unpublish(bid, btarget)
	unstage(bid, bstaging)

	for _, v := range []string{id, bid} {
		if _, err := cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v}); err != nil {
			t.Fatalf("DeleteVolume: %v", err)
		}
	}
}

// TestLabExpand (the VM lab's 85-csi-node): a volume on the pool's only
// LUN of ISER_CSI_LAB_EXPAND_SIZE bytes is staged as ext4, published and
// written; ISER_CSI_LAB_GROW (a shell command) grows the LUN on the target
// to ISER_CSI_LAB_GROWN_SIZE bytes; NodeExpandVolume then grows the ublk
// device and the filesystem where ISER_CSI_LAB_UPDATE_SIZE is "yes" (a
// kernel with UBLK_F_UPDATE_SIZE), else answers FAILED_PRECONDITION naming
// the feature. The file is intact either way.
func TestLabExpand(t *testing.T) {
	ep, dir := os.Getenv("ISER_CSI_LAB_ENDPOINT"), os.Getenv("ISER_CSI_LAB_DIR")
	grow := os.Getenv("ISER_CSI_LAB_GROW")
	size, _ := strconv.ParseInt(os.Getenv("ISER_CSI_LAB_EXPAND_SIZE"), 10, 64)
	grown, _ := strconv.ParseInt(os.Getenv("ISER_CSI_LAB_GROWN_SIZE"), 10, 64)
	if ep == "" || dir == "" || grow == "" || size == 0 || grown <= size {
		t.Skip("ISER_CSI_LAB_* not set: for the VM lab's 85-csi-node")
	}
	conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, nc := csipb.NewControllerClient(conn), csipb.NewNodeClient(conn)
	fsc := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	r, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "lab-expand", VolumeCapabilities: []*csipb.VolumeCapability{fsc},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size, LimitBytes: size}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Volume.VolumeId
	staging, target := filepath.Join(dir, "staging-expand"), filepath.Join(dir, "pod4", "mount")
	os.MkdirAll(staging, 0o750)
	if _, err := nc.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsc}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: fsc}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 4<<20)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(target, "data"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	total := func() int64 {
		st, err := nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		if err != nil {
			t.Fatal(err)
		}
		return st.Usage[0].Total
	}
	before := total()
	if out, err := exec.CommandContext(ctx, "sh", "-c", grow).CombinedOutput(); err != nil {
		t.Fatalf("grow the LUN: %v\n%s", err, out)
	}
	er, err := nc.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: grown}, VolumeCapability: fsc})
	if os.Getenv("ISER_CSI_LAB_UPDATE_SIZE") == "yes" {
		if err != nil || er.CapacityBytes != grown {
			t.Fatalf("NodeExpandVolume = %v, %v; want %d bytes", er, err, grown)
		}
		after := total()
		t.Logf("filesystem: %d bytes before, %d after", before, after)
		if after <= before {
			t.Fatalf("the filesystem did not grow: %d bytes before, %d after", before, after)
		}
	} else {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "UBLK_F_UPDATE_SIZE") {
			t.Fatalf("NodeExpandVolume without UBLK_F_UPDATE_SIZE = %v; want FailedPrecondition naming it", err)
		}
		t.Logf("NodeExpandVolume: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the file after the expansion: %v", err)
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// TestLabRestart (the VM lab's 85-csi-node) runs in two phases around a
// node plugin killed and started again on the same state directory:
// ISER_CSI_LAB_PHASE=before creates, stages, publishes and writes a file;
// ISER_CSI_LAB_PHASE=after (the new plugin) finds the file through the
// same mount, and unpublishes, unstages and deletes: the new plugin knows
// what the old one staged.
func TestLabRestart(t *testing.T) {
	ep, dir, phase := os.Getenv("ISER_CSI_LAB_ENDPOINT"), os.Getenv("ISER_CSI_LAB_DIR"), os.Getenv("ISER_CSI_LAB_PHASE")
	if ep == "" || dir == "" || phase == "" {
		t.Skip("ISER_CSI_LAB_* not set: for the VM lab's 85-csi-node")
	}
	conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc, nc := csipb.NewControllerClient(conn), csipb.NewNodeClient(conn)
	fsc := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	r, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "lab-restart", VolumeCapabilities: []*csipb.VolumeCapability{fsc},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Volume.VolumeId
	staging, target := filepath.Join(dir, "staging-restart"), filepath.Join(dir, "pod5", "mount")
	file, want := filepath.Join(target, "before-restart"), []byte("written before the plugin's restart\n")
	switch phase {
	case "before":
		os.MkdirAll(staging, 0o750)
		if _, err := nc.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsc}); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: fsc}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
	case "after":
		// From the device, not the page cache; and a write that must reach
		// it (the daemon may be a new one that took the device over).
		_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
		if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("the file after the restart: %q, %v", b, err)
		}
		f, err := os.Create(filepath.Join(target, "after-restart"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(want); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync after the restart: %v", err)
		}
		f.Close()
		st, err := nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		if err != nil || st.VolumeCondition.GetAbnormal() {
			t.Fatalf("stats after the restart: %v, %v", st, err)
		}
		// Staged again with the same arguments: already staged, nothing done.
		if _, err := nc.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsc}); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Fatal(err)
		}
		if _, err := cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("ISER_CSI_LAB_PHASE %q: want before or after", phase)
	}
}

// TestLabFence (the VM lab's 85-csi-node): two node plugins on one host,
// ISER_CSI_LAB_ENDPOINT (node A, with the controller) and
// ISER_CSI_LAB_ENDPOINT_B (node B, another node ID and initiator name).
// A stages a block volume read-write; B's read-write stage of it is
// FAILED_PRECONDITION naming the holder (ISER_CSI_LAB_HOLDER: A's
// initiator name, which LIO reports). Once A unstaged, B stages it; B
// unstages.
func TestLabFence(t *testing.T) {
	epA, epB, dir := os.Getenv("ISER_CSI_LAB_ENDPOINT"), os.Getenv("ISER_CSI_LAB_ENDPOINT_B"), os.Getenv("ISER_CSI_LAB_DIR")
	if epA == "" || epB == "" || dir == "" {
		t.Skip("ISER_CSI_LAB_ENDPOINT, ISER_CSI_LAB_ENDPOINT_B and ISER_CSI_LAB_DIR not set: for the VM lab's 85-csi-node")
	}
	dial := func(ep string) *grpc.ClientConn {
		conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	connA, connB := dial(epA), dial(epB)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, a, b := csipb.NewControllerClient(connA), csipb.NewNodeClient(connA), csipb.NewNodeClient(connB)
	bc := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	r, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "lab-fence", VolumeCapabilities: []*csipb.VolumeCapability{bc},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Volume.VolumeId
	sa, sb := filepath.Join(dir, "fence-a"), filepath.Join(dir, "fence-b")
	for _, s := range []string{sa, sb} {
		if err := os.MkdirAll(s, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	stage := func(who string, nc csipb.NodeClient, staging string) error {
		start := time.Now()
		_, err := nc.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: bc})
		t.Logf("%s: NodeStageVolume: %v after %v", who, err, time.Since(start).Round(time.Millisecond))
		return err
	}
	unstage := func(who string, nc csipb.NodeClient, staging string) {
		if _, err := nc.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Fatalf("%s: NodeUnstageVolume: %v", who, err)
		}
	}
	if err := stage("A", a, sa); err != nil {
		t.Fatal(err)
	}
	err = stage("B", b, sb)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "reserved by key") ||
		!strings.Contains(err.Error(), os.Getenv("ISER_CSI_LAB_HOLDER")) {
		t.Fatalf("B's stage while A holds the volume: %v; want FAILED_PRECONDITION naming %s", err, os.Getenv("ISER_CSI_LAB_HOLDER"))
	}
	t.Logf("fenced: %v", err)
	unstage("A", a, sa)
	if err := stage("B", b, sb); err != nil {
		t.Fatalf("B's stage once A unstaged: %v", err)
	}
	unstage("B", b, sb)
	if _, err := cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}
