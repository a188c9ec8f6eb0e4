package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestNode(t *testing.T) {
	dir := t.TempDir()
	n := NewNode("node-1")
	n.RDMADir = filepath.Join(dir, "infiniband")
	n.MountInfo = filepath.Join(dir, "mountinfo")
	os.WriteFile(n.MountInfo, []byte("36 35 98:0 / /mnt/pod\\040a rw,noatime master:1 - ext4 /dev/ublkb0 rw\n"), 0o644)
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
	if r, err := n.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{}); err != nil || len(r.Capabilities) != 0 {
		t.Fatalf("NodeGetCapabilities = %+v, %v", r, err)
	}
	for _, tc := range []struct {
		id, path string
		code     codes.Code
	}{
		{"v", "/mnt/other", codes.OK},
		{"v", "/mnt/pod a/", codes.Unimplemented},
		{"", "/mnt/other", codes.InvalidArgument},
		{"v", "", codes.InvalidArgument},
	} {
		_, err := n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: tc.id, TargetPath: tc.path})
		if status.Code(err) != tc.code {
			t.Errorf("NodeUnpublishVolume(%q, %q) = %v; want %v", tc.id, tc.path, err, tc.code)
		}
	}
	if _, err := n.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("NodeStageVolume = %v", err)
	}
}
