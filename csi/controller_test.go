package csi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	testTarget = "iqn.2026-11.test:pool"
	mib        = 1 << 20
)

// testLUs: LUNs 1-4 of 256, 64, 128 and 64 MiB.
var testLUs = []LU{
	{LUN: 1, Size: 256 * mib, BlockSize: 512, LUID: "naa.6000000000000000000000000000000a"},
	{LUN: 2, Size: 64 * mib, BlockSize: 512, LUID: "naa.6000000000000000000000000000000b"},
	{LUN: 3, Size: 128 * mib, BlockSize: 512, LUID: "naa.6000000000000000000000000000000c"},
	{LUN: 4, Size: 64 * mib, BlockSize: 4096, LUID: "naa.6000000000000000000000000000000d"},
}

func newTestController(t *testing.T, dir string) *Controller {
	t.Helper()
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, err := NewController(testTarget, testLUs, st, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mountCap() []*csipb.VolumeCapability {
	return []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
}

func create(c *Controller, name string, required, limit int64) (*csipb.Volume, error) {
	resp, err := c.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: mountCap(),
		CapacityRange: &csipb.CapacityRange{RequiredBytes: required, LimitBytes: limit}})
	return resp.GetVolume(), err
}

// TestCreateVolume: each step on one controller, in order.
func TestCreateVolume(t *testing.T) {
	c := newTestController(t, t.TempDir())
	for _, tc := range []struct {
		name            string
		required, limit int64
		wantLUN         uint16 // 0: an error
		wantCode        codes.Code
	}{
		{"a", 1, 0, 2, codes.OK},                        // smallest fit, lowest LUN among equals
		{"a", 1, 0, 2, codes.OK},                        // idempotent
		{"a", 64 * mib, 64 * mib, 2, codes.OK},          // idempotent: the range still fits
		{"a", 128 * mib, 0, 0, codes.AlreadyExists},     // same name, does not fit
		{"b", 64 * mib, 0, 4, codes.OK},                 // the other 64 MiB LUN
		{"c", 64 * mib, 0, 3, codes.OK},                 // then 128 MiB
		{"d", 300 * mib, 0, 0, codes.OutOfRange},        // no LUN is that large
		{"d", 65 * mib, 127 * mib, 0, codes.OutOfRange}, // no LUN between
		{"d", 0, 128 * mib, 0, codes.ResourceExhausted}, // three fit, all taken
		{"d", 0, 0, 1, codes.OK},                        // the last one
		{"e", 0, 0, 0, codes.ResourceExhausted},
		{"", 0, 0, 0, codes.InvalidArgument},
		{"f", 2, 1, 0, codes.InvalidArgument},
		{"f", -1, 0, 0, codes.InvalidArgument},
	} {
		v, err := create(c, tc.name, tc.required, tc.limit)
		if status.Code(err) != tc.wantCode {
			t.Fatalf("CreateVolume(%q, %d, %d) = %v; want %v", tc.name, tc.required, tc.limit, err, tc.wantCode)
		}
		if tc.wantLUN == 0 {
			continue
		}
		id, perr := ParseVolumeID(v.GetVolumeId())
		want := testLUs[tc.wantLUN-1]
		if perr != nil || id != (VolumeID{Target: testTarget, LUN: want.LUN, LUID: want.LUID}) || v.GetCapacityBytes() != want.Size {
			t.Fatalf("CreateVolume(%q, %d, %d) = %+v (%v); want LUN %d of %d bytes", tc.name, tc.required, tc.limit, v, perr, tc.wantLUN, want.Size)
		}
	}
	if _, err := c.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{Name: "g"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CreateVolume without capabilities: %v", err)
	}
	multi := mountCap()
	multi[0].AccessMode.Mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	if _, err := c.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{Name: "g", VolumeCapabilities: multi}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CreateVolume multi-node writer: %v", err)
	}
}

// TestDeleteVolumeAndRestart: a deleted volume's LU is free again; the
// allocations survive a new controller on the same state directory, and a
// second controller cannot open a directory in use.
func TestDeleteVolumeAndRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewController(testTarget, testLUs, st, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := create(c, "a", 0, 0)
	b, _ := create(c, "b", 0, 0)
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), "another controller holds") {
		t.Fatalf("second OpenStore = %v", err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if _, err := c.DeleteVolume(context.Background(), &csipb.DeleteVolumeRequest{VolumeId: a.VolumeId}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"some-volume-id", "iser1:9:naa.6:iqn.x"} {
		if _, err := c.DeleteVolume(context.Background(), &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume(%q) = %v", id, err)
		}
	}
	if _, err := c.DeleteVolume(context.Background(), &csipb.DeleteVolumeRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("DeleteVolume without ID = %v", err)
	}
	st.Close()

	c2 := newTestController(t, dir)
	if v, err := create(c2, "b", 0, 0); err != nil || v.VolumeId != b.VolumeId {
		t.Fatalf("after restart, b = %+v, %v; want %s", v, err, b.VolumeId)
	}
	if v, err := create(c2, "c", 0, 0); err != nil || v.VolumeId != a.VolumeId {
		t.Fatalf("after restart, c = %+v, %v; want a's freed LU %s", v, err, a.VolumeId)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFileName+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary state file left: %v", err)
	}
	// Another pool's state directory is refused.
	c2.store.Close()
	st3, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st3.Close()
	if _, err := NewController("iqn.2026-11.test:other", testLUs, st3, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "holds target") {
		t.Fatalf("NewController on another target's state = %v", err)
	}
}

// TestCreateVolumeConcurrent: many calls with one name get one LU, and
// calls with distinct names distinct LUs (run under -race).
func TestCreateVolumeConcurrent(t *testing.T) {
	c := newTestController(t, t.TempDir())
	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := create(c, "same", 0, 0)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = v.VolumeId
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("one name, several volumes: %v", ids)
		}
	}
	got := map[string]bool{}
	var mu sync.Mutex
	for _, n := range []string{"x", "y", "z"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := create(c, n, 0, 0)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[v.VolumeId] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(got) != 3 || got[ids[0]] {
		t.Fatalf("distinct names share LUs: %v (same: %s)", got, ids[0])
	}
}

func TestListVolumesPages(t *testing.T) {
	c := newTestController(t, t.TempDir())
	for _, n := range []string{"d", "b", "a", "c"} {
		if _, err := create(c, n, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	list := func(max int32, token string) ([]string, string, error) {
		resp, err := c.ListVolumes(context.Background(), &csipb.ListVolumesRequest{MaxEntries: max, StartingToken: token})
		var ids []string
		for _, e := range resp.GetEntries() {
			ids = append(ids, c.byID[e.Volume.VolumeId].Name)
		}
		return ids, resp.GetNextToken(), err
	}
	all, tok, err := list(0, "")
	if err != nil || strings.Join(all, "") != "abcd" || tok != "" {
		t.Fatalf("ListVolumes = %v, %q, %v", all, tok, err)
	}
	page, tok, err := list(2, "")
	if err != nil || strings.Join(page, "") != "ab" || tok == "" {
		t.Fatalf("page 1 = %v, %q, %v", page, tok, err)
	}
	// b, the page's last entry, goes: the token still works.
	v, _ := create(c, "b", 0, 0)
	if _, err := c.DeleteVolume(context.Background(), &csipb.DeleteVolumeRequest{VolumeId: v.VolumeId}); err != nil {
		t.Fatal(err)
	}
	page, tok, err = list(2, tok)
	if err != nil || strings.Join(page, "") != "cd" || tok != "" {
		t.Fatalf("page 2 = %v, %q, %v", page, tok, err)
	}
	for _, bad := range []string{"invalid-token", "after:zz", "after:"} {
		if _, _, err := list(0, bad); status.Code(err) != codes.Aborted {
			t.Fatalf("token %q: %v", bad, err)
		}
	}
	if _, _, err := list(-1, ""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("max_entries -1: %v", err)
	}
}

func TestExpandValidateCapacity(t *testing.T) {
	c := newTestController(t, t.TempDir())
	v, _ := create(c, "a", 0, 0) // LUN 2, 64 MiB
	ctx := context.Background()
	expand := func(id string, r *csipb.CapacityRange) (*csipb.ControllerExpandVolumeResponse, error) {
		return c.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: r})
	}
	if r, err := expand(v.VolumeId, &csipb.CapacityRange{RequiredBytes: 64 * mib}); err != nil || r.CapacityBytes != 64*mib || !r.NodeExpansionRequired {
		t.Fatalf("expand to the LU's size = %+v, %v", r, err)
	}
	for _, tc := range []struct {
		id   string
		r    *csipb.CapacityRange
		code codes.Code
	}{
		{v.VolumeId, &csipb.CapacityRange{RequiredBytes: 64*mib + 1}, codes.OutOfRange},
		{v.VolumeId, &csipb.CapacityRange{RequiredBytes: 1, LimitBytes: 32 * mib}, codes.OutOfRange},
		{v.VolumeId, nil, codes.InvalidArgument},
		{"", &csipb.CapacityRange{RequiredBytes: 1}, codes.InvalidArgument},
		{"iser1:2:naa.6:iqn.x", &csipb.CapacityRange{RequiredBytes: 1}, codes.NotFound},
	} {
		if _, err := expand(tc.id, tc.r); status.Code(err) != tc.code {
			t.Errorf("expand(%q, %v) = %v; want %v", tc.id, tc.r, err, tc.code)
		}
	}

	val := func(id string, caps []*csipb.VolumeCapability) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
		return c.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: caps})
	}
	if r, err := val(v.VolumeId, mountCap()); err != nil || r.Confirmed == nil {
		t.Fatalf("validate = %+v, %v", r, err)
	}
	bad := mountCap()
	bad[0].GetMount().FsType = "btrfs"
	if r, err := val(v.VolumeId, bad); err != nil || r.Confirmed != nil || !strings.Contains(r.Message, "btrfs") {
		t.Fatalf("validate btrfs = %+v, %v", r, err)
	}
	if _, err := val("iser1:2:naa.6:iqn.x", mountCap()); status.Code(err) != codes.NotFound {
		t.Fatalf("validate unknown: %v", err)
	}
	if _, err := val(v.VolumeId, nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("validate without capabilities: %v", err)
	}

	capResp, err := c.GetCapacity(ctx, &csipb.GetCapacityRequest{})
	if err != nil || capResp.AvailableCapacity != (256+128+64)*mib || capResp.MaximumVolumeSize.GetValue() != 256*mib ||
		capResp.MinimumVolumeSize.GetValue() != 64*mib {
		t.Fatalf("GetCapacity = %+v, %v", capResp, err)
	}
	if _, err := c.GetCapacity(ctx, &csipb.GetCapacityRequest{Parameters: map[string]string{"x": "y"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetCapacity with a parameter: %v", err)
	}
}

// TestDeleteVolumeWipe: the LU is wiped before it is freed; a failed
// wipe keeps the volume for the next DeleteVolume; a wipe outlives the
// call that started it, and later calls join it.
func TestDeleteVolumeWipe(t *testing.T) {
	c := newTestController(t, t.TempDir())
	release := make(chan error)
	var wiped []uint16
	c.Wipe = func(ctx context.Context, lun uint16, luid string) error {
		if l, _ := c.lu(lun); l.LUID != luid {
			t.Errorf("wipe of LUN %d with identity %s", lun, luid)
		}
		if err := <-release; err != nil {
			return err
		}
		wiped = append(wiped, lun)
		return nil
	}
	v, _ := create(c, "a", 0, 0)
	del := func(ctx context.Context) error {
		_, err := c.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.VolumeId})
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- del(context.Background()) }()
	release <- os.ErrPermission
	if err := <-errc; status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "wipe LUN 2") {
		t.Fatalf("DeleteVolume with a failing wipe = %v", err)
	}
	if again, err := create(c, "a", 0, 0); err != nil || again.VolumeId != v.VolumeId {
		t.Fatalf("after a failed wipe the volume is gone: %+v, %v", again, err)
	}

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := del(short); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("DeleteVolume past its deadline = %v", err)
	}
	if _, err := create(c, "a", 0, 0); status.Code(err) != codes.Aborted {
		t.Fatalf("CreateVolume of a volume being wiped = %v", err)
	}
	go func() { errc <- del(context.Background()) }() // joins the running wipe
	release <- nil
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(wiped) != 1 || wiped[0] != 2 {
		t.Fatalf("wiped %v; want LUN 2 once", wiped)
	}
	if v2, err := create(c, "b", 0, 0); err != nil || v2.VolumeId != v.VolumeId {
		t.Fatalf("the wiped LU is not free: %+v, %v", v2, err)
	}
}

// The controller and the node judge a capability by one rule: every mode
// and access type the node stages, the controller accepts, and the reverse.
func TestCapabilityRuleShared(t *testing.T) {
	for m := range csipb.VolumeCapability_AccessMode_Mode_name {
		mode := csipb.VolumeCapability_AccessMode_Mode(m)
		for _, access := range []*csipb.VolumeCapability{
			{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}},
			{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "xfs"}}},
			{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "btrfs"}}},
		} {
			access.AccessMode = &csipb.VolumeCapability_AccessMode{Mode: mode}
			_, _, _, nodeErr := checkCapability(access)
			ctrl := checkCapabilities([]*csipb.VolumeCapability{access})
			if (nodeErr == nil) != (ctrl == "") {
				t.Errorf("mode %v, %v: node says %v, controller %q", mode, access.GetAccessType(), nodeErr, ctrl)
			}
		}
	}
	if _, _, _, err := checkCapability(&csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{
		Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}); err != nil {
		t.Fatalf("single node single writer, block: %v", err)
	}
}
