package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeOS is a NodeOS that keeps devices, filesystems and mounts in maps.
type fakeOS struct {
	mu       sync.Mutex
	next     int
	attached map[string]*fakeVol // by name
	fs       map[string]string   // device -> filesystem
	mounts   map[string]fakeMount
	users    map[string]string // device -> a user outside the plugin
	sizes    map[string]int64  // device -> size
	lunSize  int64             // the LU's size after a resize
	noResize bool
	wrongLU  bool
	reserved string // Attach fails: another node holds the LUN (this holder)
	// left holds the devices of daemons that died (ublk: quiesced, not
	// removed), by name: the next Attach of the name takes the device over.
	left  map[string]string
	calls []string
}

type fakeVol struct {
	dev   string
	id    VolumeID
	ro    bool
	state string
}

type fakeMount struct {
	source, fsType string
	bind, ro       bool
}

func newFakeOS() *fakeOS {
	return &fakeOS{attached: map[string]*fakeVol{}, fs: map[string]string{}, mounts: map[string]fakeMount{},
		users: map[string]string{}, sizes: map[string]int64{}, lunSize: 64 << 20}
}

func (f *fakeOS) call(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// took returns and forgets the calls so far.
func (f *fakeOS) took() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := strings.Join(f.calls, "; ")
	f.calls = nil
	return s
}

func (f *fakeOS) Attach(_ context.Context, name string, id VolumeID, ro bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.attached[name]; ok {
		return v.dev, nil
	}
	if f.wrongLU {
		return "", fmt.Errorf("attach: LUN %d is another LU: %w", id.LUN, ErrWrongLU)
	}
	if f.reserved != "" && !ro {
		return "", fmt.Errorf("attach LUN %d: %w: %s", id.LUN, ErrReserved, f.reserved)
	}
	dev, took := f.left[name]
	if took {
		delete(f.left, name)
	} else {
		dev = fmt.Sprintf("/dev/ublkb%d", f.next)
		f.next++
	}
	f.attached[name] = &fakeVol{dev: dev, id: id, ro: ro, state: "attached"}
	f.sizes[dev] = 64 << 20
	f.call("attach %s", name)
	return dev, nil
}

func (f *fakeOS) Detach(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.attached[name]; ok {
		delete(f.attached, name)
		f.call("detach %s", name)
	}
	return nil
}

func (f *fakeOS) Volume(_ context.Context, name string) (AttachedVolume, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.attached[name]
	if !ok {
		return AttachedVolume{}, false, nil
	}
	return AttachedVolume{Device: v.dev, State: v.state, LastError: map[bool]string{true: "connection reset"}[v.state != "attached"]}, true, nil
}

func (f *fakeOS) Resize(_ context.Context, name string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noResize {
		return 0, fmt.Errorf("resize %s: ublk: kernel lacks UBLK_F_UPDATE_SIZE (needs Linux >= 6.16): %w", name, ErrNoResize)
	}
	v := f.attached[name]
	f.sizes[v.dev] = f.lunSize
	f.call("resize %s", name)
	return f.lunSize, nil
}

// source is the device a mount at path shows, following bind mounts.
func (f *fakeOS) source(m fakeMount) string {
	for m.bind {
		up, ok := f.mounts[m.source]
		if !ok {
			return m.source
		}
		m = up
	}
	return m.source
}

func (f *fakeOS) InUse(dev string) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.users[dev]; u != "" {
		return true, u
	}
	var where []string
	for p, m := range f.mounts {
		if f.source(m) == dev {
			where = append(where, p)
		}
	}
	sort.Strings(where)
	if len(where) > 0 {
		return true, "mounted on " + where[0]
	}
	return false, ""
}

func (f *fakeOS) FSType(_ context.Context, dev string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fs[dev], nil
}

func (f *fakeOS) Mkfs(_ context.Context, dev, fsType string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fs[dev] = fsType
	f.call("mkfs %s %s", fsType, dev)
	return nil
}

func (f *fakeOS) Mount(source, target, fsType string, bind, ro bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mounts[target]; ok {
		return fmt.Errorf("mount on %s: busy", target)
	}
	if _, err := os.Stat(target); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	f.mounts[target] = fakeMount{source: source, fsType: fsType, bind: bind, ro: ro}
	f.call("mount %s %s bind=%v ro=%v", source, target, bind, ro)
	return nil
}

func (f *fakeOS) Unmount(target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mounts[target]; !ok {
		return fmt.Errorf("unmount %s: not mounted", target)
	}
	delete(f.mounts, target)
	f.call("unmount %s", target)
	return nil
}

func (f *fakeOS) MountPoint(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.mounts[filepath.Clean(path)]
	return ok, nil
}

func (f *fakeOS) Stats(path string) (VolumeStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mounts[path]; !ok {
		return VolumeStats{}, fmt.Errorf("statfs %s: not a mount", path)
	}
	return VolumeStats{Bytes: 60 << 20, BytesAvailable: 50 << 20, BytesUsed: 10 << 20, Inodes: 16384, InodesFree: 16000, InodesUsed: 384}, nil
}

func (f *fakeOS) DeviceSize(dev string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sizes[dev]
	if !ok {
		return 0, errors.New("no such device")
	}
	return s, nil
}

func (f *fakeOS) GrowFS(_ context.Context, dev, path, fsType string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.call("growfs %s %s %s", fsType, dev, path)
	return nil
}

var (
	testID  = VolumeID{Target: "iqn.2026-11.org.example:pool", LUN: 1, LUID: "naa.6001405aaaaaaaaa"}
	testID2 = VolumeID{Target: "iqn.2026-11.org.example:pool", LUN: 2, LUID: "naa.6001405bbbbbbbbb"}
)

func fsCap(fs string, mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fs}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode}}
}

func blkCap() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
}

var rwo = csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER

// testNode is a Node on a fake OS, its state in dir; staging and target
// paths are made under dir.
func testNode(t *testing.T, f *fakeOS, dir string) *Node {
	t.Helper()
	n, err := NewNode("node-1", f, filepath.Join(dir, "state"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	n.RDMADir = filepath.Join(dir, "infiniband")
	return n
}

func mustNode(t *testing.T, id string) *Node {
	n, err := NewNode(id, newFakeOS(), t.TempDir(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s = %v; want %v", what, err, code)
	}
}

func TestNodeInfoCapabilities(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, newFakeOS(), dir)
	ctx := context.Background()
	info := func() string {
		r, err := n.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		if err != nil || r.NodeId != "node-1" {
			t.Fatalf("NodeGetInfo = %+v, %v", r, err)
		}
		return r.AccessibleTopology.Segments[TopologyRDMA]
	}
	if got := info(); got != "false" {
		t.Fatalf("no RDMA directory: rdma = %q", got)
	}
	os.MkdirAll(filepath.Join(n.RDMADir, "rxe0"), 0o755)
	if got := info(); got != "true" {
		t.Fatalf("with rxe0: rdma = %q", got)
	}
	r, err := n.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range r.Capabilities {
		got = append(got, c.GetRpc().GetType().String())
	}
	if want := "STAGE_UNSTAGE_VOLUME GET_VOLUME_STATS VOLUME_CONDITION EXPAND_VOLUME"; strings.Join(got, " ") != want {
		t.Fatalf("NodeGetCapabilities = %v; want %s", got, want)
	}
}

// TestNodeMountLifecycle: kubelet's order for a filesystem volume, each
// call twice (idempotent), and unstage refused while published.
func TestNodeMountLifecycle(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "pods", "p1", "mount")
	os.Mkdir(staging, 0o750)
	id := testID.String()
	stage := &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap("", rwo)}
	if _, err := n.NodeStageVolume(ctx, stage); err != nil {
		t.Fatal(err)
	}
	name := AttachName(n.NodeID, id)
	if got, want := f.took(), "attach "+name+"; mkfs ext4 /dev/ublkb0; mount /dev/ublkb0 "+staging+" bind=false ro=false"; got != want {
		t.Fatalf("stage did %q; want %q", got, want)
	}
	if _, err := n.NodeStageVolume(ctx, stage); err != nil {
		t.Fatalf("second stage: %v", err)
	}
	if got := f.took(); got != "" {
		t.Fatalf("second stage did %q; want nothing", got)
	}
	// The same volume with another filesystem, or at another path: taken.
	_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap("xfs", rwo)})
	wantCode(t, "stage as xfs", err, codes.AlreadyExists)
	// Another volume at this staging path: taken, and nothing attached.
	_, err = n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: testID2.String(), StagingTargetPath: staging, VolumeCapability: fsCap("", rwo)})
	wantCode(t, "another volume at the staging path", err, codes.AlreadyExists)
	if got := f.took(); got != "" {
		t.Fatalf("refused stages did %q", got)
	}

	pub := &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: fsCap("ext4", rwo), Readonly: true}
	for i := 0; i < 2; i++ {
		if _, err := n.NodePublishVolume(ctx, pub); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if got, want := f.took(), "mount "+staging+" "+target+" bind=true ro=true"; got != want {
		t.Fatalf("publish did %q; want %q", got, want)
	}
	pub.Readonly = false
	_, err = n.NodePublishVolume(ctx, pub)
	wantCode(t, "publish read-write where read-only is", err, codes.AlreadyExists)

	st, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Usage) != 2 || st.Usage[0].Total != 60<<20 || st.Usage[0].Used != 10<<20 || st.Usage[1].Unit != csipb.VolumeUsage_INODES ||
		st.Usage[1].Available != 16000 || st.VolumeCondition.Abnormal {
		t.Fatalf("stats = %+v", st)
	}

	unstage := &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}
	_, err = n.NodeUnstageVolume(ctx, unstage)
	wantCode(t, "unstage while published", err, codes.FailedPrecondition)
	if got := f.took(); got != "" {
		t.Fatalf("refused unstage did %q", got)
	}
	unpub := &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}
	for i := 0; i < 2; i++ {
		if _, err := n.NodeUnpublishVolume(ctx, unpub); err != nil {
			t.Fatalf("unpublish %d: %v", i, err)
		}
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target path after unpublish: %v", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := n.NodeUnstageVolume(ctx, unstage); err != nil {
			t.Fatalf("unstage %d: %v", i, err)
		}
	}
	if got, want := f.took(), "unmount "+target+"; unmount "+staging+"; detach "+name; got != want {
		t.Fatalf("unpublish and unstage did %q; want %q", got, want)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "state", "node", "*.json")); len(ents) != 0 {
		t.Fatalf("node state left after unstage: %v", ents)
	}
	if len(f.mounts) != 0 || len(f.attached) != 0 {
		t.Fatalf("left behind: mounts %v, attached %v", f.mounts, f.attached)
	}
}

// TestNodeUnstageInUse: a device used outside the plugin (a bind mount it
// did not make, a process) is never detached; the staging mount comes back.
func TestNodeUnstageInUse(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	staging := filepath.Join(dir, "staging")
	os.Mkdir(staging, 0o750)
	id := testID.String()
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatal(err)
	}
	f.took()
	f.users["/dev/ublkb0"] = "mounted on /var/lib/kubelet/pods/x (another namespace)"
	_, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	wantCode(t, "unstage in use", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "another namespace") {
		t.Fatalf("unstage in use: %v; want where", err)
	}
	if got, want := f.took(), "unmount "+staging+"; mount /dev/ublkb0 "+staging+" bind=false ro=false"; got != want {
		t.Fatalf("refused unstage did %q; want %q", got, want)
	}
	delete(f.users, "/dev/ublkb0")
	if _, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if len(f.attached) != 0 {
		t.Fatal("not detached")
	}
}

// TestNodeExistingFilesystem: a LU with a filesystem is mounted as it is;
// one of another type than asked is refused.
func TestNodeExistingFilesystem(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	staging := filepath.Join(dir, "staging")
	f.fs["/dev/ublkb0"] = "xfs"
	req := &csipb.NodeStageVolumeRequest{VolumeId: testID.String(), StagingTargetPath: staging, VolumeCapability: fsCap("xfs", rwo)}
	if _, err := n.NodeStageVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := f.took(); strings.Contains(got, "mkfs") || !strings.Contains(got, "mount /dev/ublkb0") {
		t.Fatalf("stage of an xfs LU did %q", got)
	}
	f.fs["/dev/ublkb1"] = "xfs"
	_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: testID2.String(), StagingTargetPath: filepath.Join(dir, "s2"),
		VolumeCapability: fsCap("ext4", rwo)})
	wantCode(t, "stage ext4 on an xfs LU", err, codes.FailedPrecondition)
	if got := f.took(); strings.Contains(got, "mkfs") {
		t.Fatalf("stage ext4 on xfs did %q", got)
	}
	// Read-only and blank: nothing to mount.
	f.fs["/dev/ublkb1"] = ""
	n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: testID2.String(), StagingTargetPath: filepath.Join(dir, "s2")})
	_, err = n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: testID2.String(), StagingTargetPath: filepath.Join(dir, "s2"),
		VolumeCapability: fsCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)})
	wantCode(t, "read-only stage of a blank LU", err, codes.FailedPrecondition)
	if got := f.took(); strings.Contains(got, "mkfs") {
		t.Fatalf("read-only stage made a filesystem: %q", got)
	}
}

// TestNodeBlock: block mode publishes the device itself onto a file.
func TestNodeBlock(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "pods", "p1", "dev", "vol")
	id := testID.String()
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: blkCap()}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.took(), "attach "+AttachName(n.NodeID, id); got != want {
		t.Fatalf("block stage did %q; want %q", got, want)
	}
	pub := &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: blkCap()}
	if _, err := n.NodePublishVolume(ctx, pub); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(target); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("block target: %v, %v", fi, err)
	}
	if got, want := f.took(), "mount /dev/ublkb0 "+target+" bind=true ro=false"; got != want {
		t.Fatalf("block publish did %q; want %q", got, want)
	}
	_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target + "2",
		VolumeCapability: fsCap("", rwo)})
	wantCode(t, "mount publish of a block stage", err, codes.AlreadyExists)
	st, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || len(st.Usage) != 1 || st.Usage[0].Total != 64<<20 || st.Usage[0].Unit != csipb.VolumeUsage_BYTES {
		t.Fatalf("block stats = %+v, %v", st, err)
	}
	_, err = n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	wantCode(t, "unstage of a published block volume", err, codes.FailedPrecondition)
	if _, err := n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.took(), "unmount "+target+"; detach "+AttachName(n.NodeID, id); got != want {
		t.Fatalf("block unpublish, unstage did %q; want %q", got, want)
	}
}

// TestNodeRestart: a new plugin on the same state directory knows what
// the last one staged and published, and undoes it; two at once cannot.
func TestNodeRestart(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	id := testID.String()
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewNode("node-1", f, filepath.Join(dir, "state"), zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "another node plugin") {
		t.Fatalf("second plugin on one state directory: %v", err)
	}
	n.Close()
	f.took()
	n2 := testNode(t, f, dir)
	// Its stage again is a no-op; its stats find the volume at the target.
	if _, err := n2.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target}); err != nil {
		t.Fatal(err)
	}
	_, err := n2.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	wantCode(t, "unstage after restart while published", err, codes.FailedPrecondition)
	if _, err := n2.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.took(), "unmount "+target+"; unmount "+staging+"; detach "+AttachName(n.NodeID, id); got != want {
		t.Fatalf("after restart: %q; want %q", got, want)
	}
}

// TestNodeStatsCondition: abnormal with the reason while the session is
// down or the daemon gone.
func TestNodeStatsCondition(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	staging := filepath.Join(dir, "staging")
	id := testID.String()
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatal(err)
	}
	cond := func() *csipb.VolumeCondition {
		st, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: staging})
		if err != nil {
			t.Fatal(err)
		}
		return st.VolumeCondition
	}
	if c := cond(); c.Abnormal {
		t.Fatalf("attached: %+v", c)
	}
	f.attached[AttachName(n.NodeID, id)].state = "recovering"
	if c := cond(); !c.Abnormal || c.Message != "session recovering: connection reset" {
		t.Fatalf("recovering: %+v", c)
	}
	delete(f.attached, AttachName(n.NodeID, id))
	if c := cond(); !c.Abnormal || !strings.Contains(c.Message, "no iser-attach daemon") {
		t.Fatalf("daemon gone: %+v", c)
	}
	if got := (AttachedVolume{State: "attached", Paths: 2}).Usable(); got != "no usable path of 2" {
		t.Fatalf("no path up: %q", got)
	}
}

// TestNodeExpand: the device is resized when smaller than asked, then the
// filesystem grown; a kernel without UBLK_F_UPDATE_SIZE is
// FAILED_PRECONDITION naming it.
func TestNodeExpand(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	staging := filepath.Join(dir, "staging")
	id := testID.String()
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatal(err)
	}
	f.took()
	f.lunSize = 128 << 20
	r, err := n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 128 << 20}})
	if err != nil || r.CapacityBytes != 128<<20 {
		t.Fatalf("expand = %+v, %v", r, err)
	}
	if got, want := f.took(), "resize "+AttachName(n.NodeID, id)+"; growfs ext4 /dev/ublkb0 "+staging; got != want {
		t.Fatalf("expand did %q; want %q", got, want)
	}
	// The size asked is there already: no resize.
	if _, err := n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}}); err != nil {
		t.Fatal(err)
	}
	if got := f.took(); strings.Contains(got, "resize") {
		t.Fatalf("expand to the size there did %q", got)
	}
	f.noResize = true
	_, err = n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 256 << 20}})
	wantCode(t, "expand without UPDATE_SIZE", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "UBLK_F_UPDATE_SIZE") {
		t.Fatalf("expand without UPDATE_SIZE: %v", err)
	}
	f.noResize = false
	_, err = n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 256 << 20}})
	wantCode(t, "expand beyond the LU", err, codes.OutOfRange)
}

// TestNodeArguments: the codes csi-sanity checks, and a wrong LU.
func TestNodeArguments(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	id, s, tp := testID.String(), filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	c := fsCap("", rwo)
	unknown := testID2.String()
	for _, tc := range []struct {
		what string
		call func() error
		code codes.Code
	}{
		{"stage without ID", func() error {
			_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{StagingTargetPath: s, VolumeCapability: c})
			return err
		}, codes.InvalidArgument},
		{"stage without staging path", func() error {
			_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, VolumeCapability: c})
			return err
		}, codes.InvalidArgument},
		{"stage without capability", func() error {
			_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: s})
			return err
		}, codes.InvalidArgument},
		{"stage with fsType btrfs", func() error {
			_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: s, VolumeCapability: fsCap("btrfs", rwo)})
			return err
		}, codes.InvalidArgument},
		{"stage multi-node writer", func() error {
			_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: s,
				VolumeCapability: fsCap("", csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)})
			return err
		}, codes.InvalidArgument},
		{"stage of a malformed ID", func() error {
			_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: s, VolumeCapability: c})
			return err
		}, codes.NotFound},
		{"unstage without ID", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{StagingTargetPath: s})
			return err
		}, codes.InvalidArgument},
		{"unstage without staging path", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id})
			return err
		}, codes.InvalidArgument},
		{"unstage of a volume not staged", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: unknown, StagingTargetPath: s})
			return err
		}, codes.OK},
		{"publish without ID", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{StagingTargetPath: s, TargetPath: tp, VolumeCapability: c})
			return err
		}, codes.InvalidArgument},
		{"publish without target", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: s, VolumeCapability: c})
			return err
		}, codes.InvalidArgument},
		{"publish without staging path", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: tp, VolumeCapability: c})
			return err
		}, codes.InvalidArgument},
		{"publish without capability", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: s, TargetPath: tp})
			return err
		}, codes.InvalidArgument},
		{"publish of a volume not staged", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: unknown, StagingTargetPath: s, TargetPath: tp, VolumeCapability: c})
			return err
		}, codes.NotFound},
		{"unpublish without ID", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{TargetPath: tp})
			return err
		}, codes.InvalidArgument},
		{"unpublish without target", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id})
			return err
		}, codes.InvalidArgument},
		{"unpublish of a path never published", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: unknown, TargetPath: tp})
			return err
		}, codes.OK},
		{"stats without ID", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumePath: s})
			return err
		}, codes.InvalidArgument},
		{"stats without path", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id})
			return err
		}, codes.InvalidArgument},
		{"stats of a volume not staged", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: unknown, VolumePath: "some/path"})
			return err
		}, codes.NotFound},
		{"expand without ID", func() error {
			_, err := n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumePath: s})
			return err
		}, codes.InvalidArgument},
		{"expand without path", func() error {
			_, err := n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id})
			return err
		}, codes.InvalidArgument},
		{"expand of a volume not staged", func() error {
			_, err := n.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: unknown, VolumePath: "some/path"})
			return err
		}, codes.NotFound},
	} {
		if err := tc.call(); status.Code(err) != tc.code {
			t.Errorf("%s = %v; want %v", tc.what, err, tc.code)
		}
	}
	if got := f.took(); got != "" {
		t.Fatalf("refused calls did %q", got)
	}
	// Staged: stats at a path that is neither staging nor target.
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: s, VolumeCapability: c}); err != nil {
		t.Fatal(err)
	}
	_, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: "some/path"})
	wantCode(t, "stats at another path", err, codes.NotFound)
	// A mount point at a target this plugin did not publish stays.
	os.Mkdir(tp, 0o750)
	f.mounts[tp] = fakeMount{source: "/dev/sda1"}
	_, err = n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: tp})
	wantCode(t, "unpublish of a foreign mount", err, codes.FailedPrecondition)
	if _, ok := f.mounts[tp]; !ok {
		t.Fatal("foreign mount removed")
	}
}

// TestNodeWrongLU: a LUN that is now another LU is NotFound, leaves no
// record and frees the staging path.
func TestNodeWrongLU(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	f.wrongLU = true
	n := testNode(t, f, dir)
	ctx := context.Background()
	s := filepath.Join(dir, "staging")
	_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: testID.String(), StagingTargetPath: s, VolumeCapability: fsCap("", rwo)})
	wantCode(t, "stage of a renumbered LUN", err, codes.NotFound)
	if ents, _ := filepath.Glob(filepath.Join(dir, "state", "node", "*.json")); len(ents) != 0 {
		t.Fatalf("record left: %v", ents)
	}
	f.wrongLU = false
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: testID2.String(), StagingTargetPath: s, VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatalf("another volume at the freed staging path: %v", err)
	}
}

// TestNodeReserved: a read-write stage of a LUN another node holds fails
// with FAILED_PRECONDITION naming the holder, leaves no record, and works
// once the holder let go; a read-only stage is not fenced.
func TestNodeReserved(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	f.reserved = "reserved by key 0x00000000000000a1 (Write Exclusive, Registrants Only), initiator iqn.2026-11.test:node-a"
	n := testNode(t, f, dir)
	ctx := context.Background()
	s := filepath.Join(dir, "staging")
	_, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: testID.String(), StagingTargetPath: s, VolumeCapability: fsCap("", rwo)})
	wantCode(t, "stage of a LUN held by another node", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "iqn.2026-11.test:node-a") {
		t.Fatalf("the error does not name the holder: %v", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "state", "node", "*.json")); len(ents) != 0 {
		t.Fatalf("record left: %v", ents)
	}
	f.reserved = ""
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: testID.String(), StagingTargetPath: s, VolumeCapability: fsCap("", rwo)}); err != nil {
		t.Fatalf("stage once the holder let go: %v", err)
	}
}

// TestNodeRecover: a plugin that starts while a staged volume's daemon is
// gone attaches it again, taking its left device over; a volume whose
// daemon serves is not touched; one that comes back as another device is
// not counted.
func TestNodeRecover(t *testing.T) {
	dir := t.TempDir()
	f := newFakeOS()
	n := testNode(t, f, dir)
	ctx := context.Background()
	ids := []string{testID.String(), testID2.String()}
	for i, id := range ids {
		if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id,
			StagingTargetPath: filepath.Join(dir, fmt.Sprint("staging", i)), VolumeCapability: fsCap("", rwo)}); err != nil {
			t.Fatal(err)
		}
	}
	n.Close()
	// The first volume's daemon died and left its device.
	dead := AttachName(n.NodeID, ids[0])
	f.left = map[string]string{dead: f.attached[dead].dev}
	delete(f.attached, dead)
	f.took()
	n2 := testNode(t, f, dir)
	if got := n2.Recover(ctx, time.Second); got != 1 {
		t.Fatalf("Recover = %d, want 1", got)
	}
	if got, want := f.took(), "attach "+dead; got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if f.attached[dead] == nil || f.attached[dead].dev != "/dev/ublkb0" {
		t.Fatalf("not taken over: %+v", f.attached[dead])
	}
	if got := n2.Recover(ctx, time.Second); got != 0 || f.took() != "" {
		t.Fatal("a second Recover attached again")
	}
	// Gone for good (no device left): attached as a new device, not counted.
	n2.Close()
	delete(f.attached, dead)
	n3 := testNode(t, f, dir)
	if got := n3.Recover(ctx, time.Second); got != 0 {
		t.Fatalf("Recover as another device = %d, want 0", got)
	}
}
