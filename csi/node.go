package csi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TopologyRDMA is the topology key NodeGetInfo sets to "true" when the
// node has an RDMA device (/sys/class/infiniband is not empty), else
// "false".
const TopologyRDMA = PluginName + "/rdma"

// Node is the part of the CSI Node service that is built: NodeGetInfo,
// NodeGetCapabilities (none claimed) and NodeUnpublishVolume for a path
// that holds no mount. Staging and publishing are not built: those calls
// answer Unimplemented.
type Node struct {
	csipb.UnimplementedNodeServer
	NodeID string
	// RDMADir and MountInfo are /sys/class/infiniband and
	// /proc/self/mountinfo; tests change them.
	RDMADir, MountInfo string
}

// NewNode is the Node service of node id.
func NewNode(id string) *Node {
	return &Node{NodeID: id, RDMADir: "/sys/class/infiniband", MountInfo: "/proc/self/mountinfo"}
}

// NodeGetInfo: the node ID and whether it has an RDMA device.
func (n *Node) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	ents, _ := os.ReadDir(n.RDMADir)
	return &csipb.NodeGetInfoResponse{NodeId: n.NodeID, AccessibleTopology: &csipb.Topology{
		Segments: map[string]string{TopologyRDMA: strconv.FormatBool(len(ents) > 0)}}}, nil
}

// NodeGetCapabilities claims nothing: no stage, stats or expansion yet.
func (n *Node) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{}, nil
}

// NodeUnpublishVolume: this plugin publishes nothing yet, so a target
// path without a mount has nothing to undo (OK); a mount there is not
// this plugin's to remove, and unmounting is not built (Unimplemented).
func (n *Node) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	mounted, err := n.mountPoint(req.GetTargetPath())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node unpublish: %v", err)
	}
	if mounted {
		return nil, status.Errorf(codes.Unimplemented, "node unpublish: %s is a mount point; unpublishing is not built yet", req.GetTargetPath())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// mountPoint says whether path is a mount point in n.MountInfo.
func (n *Node) mountPoint(path string) (bool, error) {
	b, err := os.ReadFile(n.MountInfo)
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

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
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
