package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TopologyRDMA is the topology key NodeGetInfo sets to "true" when the
// node has an RDMA device (/sys/class/infiniband is not empty), else
// "false".
const TopologyRDMA = PluginName + "/rdma"

// Attacher attaches a volume's LU as a local block device through a
// daemon that outlives the plugin (iser-attach attach --daemon) and talks
// to that daemon through its control socket.
type Attacher interface {
	// Attach attaches LU id under the iser-attach volume name, or returns
	// the device of the daemon already serving name. It checks the LU's
	// identity and fails with ErrWrongLU (leaving nothing attached) when
	// the LUN is another LU, and with ErrNotInPool for another target.
	Attach(ctx context.Context, name string, id VolumeID, readOnly bool) (device string, err error)
	// Detach flushes, removes the device and logs out; nothing attached
	// under name is no error. The caller has checked that the device is
	// not in use.
	Detach(ctx context.Context, name string) error
	// Volume is the daemon's status, found false when nothing serves name.
	Volume(ctx context.Context, name string) (v AttachedVolume, found bool, err error)
	// Resize reads the LU's capacity again and sets the device's size to
	// it; ErrNoResize when the kernel or frontend cannot.
	Resize(ctx context.Context, name string) (newSize int64, err error)
}

// AttachedVolume is what a volume's daemon reports.
type AttachedVolume struct {
	Device string
	// State is the daemon's: attached, recovering, failed, detaching.
	State string
	// PathsUp counts usable paths; Paths all of them (0: one portal).
	PathsUp, Paths int
	LastError      string
}

// Usable says why I/O on the volume cannot go through now, or "".
func (v AttachedVolume) Usable() string {
	switch {
	case v.State != "attached":
		msg := "session " + v.State
		if v.LastError != "" {
			msg += ": " + v.LastError
		}
		return msg
	case v.Paths > 0 && v.PathsUp == 0:
		return fmt.Sprintf("no usable path of %d", v.Paths)
	}
	return ""
}

// NodeOS is what the Node service does to the node: the attach daemon
// (Attacher), filesystems and mounts. HostOS is the real one.
type NodeOS interface {
	Attacher
	// InUse says whether the block device is in use anywhere (mounted in
	// any mount namespace, held, opened O_EXCL), and where.
	InUse(device string) (bool, string)
	// FSType is the filesystem blkid finds on device, "" for none.
	FSType(ctx context.Context, device string) (string, error)
	Mkfs(ctx context.Context, device, fsType string) error
	// Mount mounts source at target: a filesystem of fsType, or with bind
	// a bind mount; readOnly makes it read-only.
	Mount(source, target, fsType string, bind, readOnly bool) error
	Unmount(target string) error
	// MountPoint says whether path is a mount point.
	MountPoint(path string) (bool, error)
	Stats(path string) (VolumeStats, error)
	DeviceSize(device string) (int64, error)
	// GrowFS grows the filesystem of fsType on device, mounted at path,
	// to the device's size.
	GrowFS(ctx context.Context, device, path, fsType string) error
}

// VolumeStats are a mounted filesystem's sizes.
type VolumeStats struct {
	Bytes, BytesAvailable, BytesUsed int64
	Inodes, InodesFree, InodesUsed   int64
}

// ErrWrongLU: the LUN of a volume ID is now another LU.
var ErrWrongLU = errors.New("the LUN is another LU than the volume's")

// ErrNotInPool: the volume ID's target is not the node's pool's.
var ErrNotInPool = errors.New("the volume's target is not this node's pool")

// ErrReserved: another node holds the persistent reservation of the
// volume's LUN (it is staged read-write there).
var ErrReserved = errors.New("another node holds the volume's reservation")

// ErrNoResize: the device's size cannot change on this node.
var ErrNoResize = errors.New("the device cannot be resized")

// nodeVolume is one staged volume, recorded in the state directory's
// node/NAME.json before the call that changed it answers.
type nodeVolume struct {
	VolumeID    string `json:"volume_id"`
	Name        string `json:"name"` // the iser-attach volume name
	StagingPath string `json:"staging_path"`
	Block       bool   `json:"block"`
	FSType      string `json:"fs_type,omitempty"`
	ReadOnly    bool   `json:"read_only"`
	Device      string `json:"device,omitempty"`
	// Published maps each target path to whether it is read-only.
	Published map[string]bool `json:"published,omitempty"`
}

// Node is the CSI Node service: stage (attach, mkfs, mount), publish (bind
// mount), their undoing, volume stats and expansion.
type Node struct {
	csipb.UnimplementedNodeServer
	NodeID string
	// RDMADir is /sys/class/infiniband; tests change it.
	RDMADir string
	os      NodeOS
	dir     string // the node's state: DIR/node
	lock    *os.File
	log     zerolog.Logger

	mu   sync.Mutex
	vols map[string]*nodeVolume // by volume ID
}

// NewNode is the Node service of node id, doing its work through os and
// recording staged volumes in stateDir/node, from which it reads back what
// an earlier plugin staged.
func NewNode(id string, os NodeOS, stateDir string, log zerolog.Logger) (*Node, error) {
	n := &Node{NodeID: id, RDMADir: "/sys/class/infiniband", os: os, dir: filepath.Join(stateDir, "node"),
		log: log, vols: map[string]*nodeVolume{}}
	if err := n.load(); err != nil {
		return nil, err
	}
	return n, nil
}

// AttachName is the iser-attach volume name of a volume ID on a node:
// csi- and 16 hex digits of the SHA-256 of both (an ID can be longer than
// a name may be). The node ID is in it so that two node plugins on one
// kernel (a test, kind's nodes) never share a volume's daemon.
func AttachName(nodeID, volumeID string) string {
	h := sha256.Sum256([]byte(nodeID + "\x00" + volumeID))
	return "csi-" + hex.EncodeToString(h[:8])
}

// NodeGetInfo: the node ID and whether it has an RDMA device.
func (n *Node) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	ents, _ := os.ReadDir(n.RDMADir)
	return &csipb.NodeGetInfoResponse{NodeId: n.NodeID, AccessibleTopology: &csipb.Topology{
		Segments: map[string]string{TopologyRDMA: strconv.FormatBool(len(ents) > 0)}}}, nil
}

// NodeGetCapabilities: stage/unstage, volume stats with the volume's
// condition, and expansion.
func (n *Node) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, c := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_VOLUME_CONDITION,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: c}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCapability checks a volume capability: block, or mount with fsType
// ext4, xfs or none (ext4); an access mode this driver offers. It returns
// whether it is block, the filesystem, and whether the mode only reads.
func checkCapability(c *csipb.VolumeCapability) (block bool, fsType string, readOnly bool, err error) {
	if c == nil {
		return false, "", false, status.Error(codes.InvalidArgument, "volume capability missing")
	}
	switch m := c.GetAccessMode().GetMode(); m {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		readOnly = true
	default:
		return false, "", false, status.Errorf(codes.InvalidArgument, "access mode %v: not offered (several writers need fencing, not built)", m)
	}
	switch {
	case c.GetBlock() != nil:
		return true, "", readOnly, nil
	case c.GetMount() != nil:
		fs := c.GetMount().GetFsType()
		switch fs {
		case "":
			fs = "ext4"
		case "ext4", "xfs":
		default:
			return false, "", false, status.Errorf(codes.InvalidArgument, "fsType %q: want ext4 or xfs", fs)
		}
		return false, fs, readOnly, nil
	}
	return false, "", false, status.Error(codes.InvalidArgument, "volume capability: neither block nor mount access")
}

// NodeStageVolume attaches the volume's LU (its daemon outlives the
// plugin), checks its identity, and in mount mode makes a filesystem on a
// blank LU and mounts it at the staging path.
func (n *Node) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	block, fsType, ro, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	id, err := ParseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "node stage: %v", err)
	}
	staging := filepath.Clean(req.GetStagingTargetPath())
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, v := range n.vols {
		if v.StagingPath == staging && v.VolumeID != req.GetVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "node stage: %s holds volume %s", staging, v.VolumeID)
		}
	}
	v := n.vols[req.GetVolumeId()]
	fresh := v == nil
	if v != nil && (v.StagingPath != staging || v.Block != block || v.FSType != fsType || v.ReadOnly != ro) {
		return nil, status.Errorf(codes.AlreadyExists, "node stage: volume %s is staged at %s (block %v, fsType %q, read-only %v)",
			v.VolumeID, v.StagingPath, v.Block, v.FSType, v.ReadOnly)
	}
	if v == nil {
		// Recorded before the attach, so that a plugin that dies during
		// it finds the volume to unstage.
		v = &nodeVolume{VolumeID: req.GetVolumeId(), Name: AttachName(n.NodeID, req.GetVolumeId()), StagingPath: staging,
			Block: block, FSType: fsType, ReadOnly: ro}
		if err := n.save(v); err != nil {
			return nil, status.Errorf(codes.Internal, "node stage: %v", err)
		}
	}
	t0 := time.Now()
	dev, err := n.os.Attach(ctx, v.Name, id, ro)
	tAttach := time.Since(t0)
	if err != nil {
		if fresh { // nothing attached: the staging path is free again
			if rerr := n.remove(v); rerr != nil {
				err = fmt.Errorf("%w; %w", err, rerr)
			}
		}
		code := codes.Internal
		switch {
		case errors.Is(err, ErrWrongLU) || errors.Is(err, ErrNotInPool):
			code = codes.NotFound
		case errors.Is(err, ErrReserved):
			code = codes.FailedPrecondition
		}
		return nil, status.Errorf(code, "node stage %s: %v", v.VolumeID, err)
	}
	if v.Device != dev {
		v.Device = dev
		if err := n.save(v); err != nil {
			return nil, status.Errorf(codes.Internal, "node stage: %v", err)
		}
	}
	log := n.log.With().Str("volume_id", v.VolumeID).Str("device", dev).Logger()
	if block {
		log.Info().Dur("attach", tAttach).Msg("staged (block)")
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	if mounted, err := n.os.MountPoint(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "node stage: %v", err)
	} else if mounted {
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	var tMkfs time.Duration
	have, err := n.os.FSType(ctx, dev)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node stage %s: %v", v.VolumeID, err)
	}
	switch {
	case have == "" && ro:
		return nil, status.Errorf(codes.FailedPrecondition, "node stage %s: %s holds no filesystem and the volume is read-only", v.VolumeID, dev)
	case have == "":
		t1 := time.Now()
		if err := n.os.Mkfs(ctx, dev, fsType); err != nil {
			return nil, status.Errorf(codes.Internal, "node stage %s: %v", v.VolumeID, err)
		}
		tMkfs = time.Since(t1)
	case have != fsType:
		return nil, status.Errorf(codes.FailedPrecondition, "node stage %s: %s holds %s, not %s", v.VolumeID, dev, have, fsType)
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "node stage: %v", err)
	}
	t2 := time.Now()
	if err := n.os.Mount(dev, staging, fsType, false, ro); err != nil {
		return nil, status.Errorf(codes.Internal, "node stage %s: %v", v.VolumeID, err)
	}
	log.Info().Dur("attach", tAttach).Dur("mkfs", tMkfs).Dur("mount", time.Since(t2)).Str("fs_type", fsType).
		Str("staging_path", staging).Msg("staged")
	return &csipb.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume unmounts the staging path, then flushes and detaches
// (the daemon ends, the device goes, the session logs out) and forgets the
// volume. It refuses with FAILED_PRECONDITION while the volume is
// published or its device in use anywhere.
func (n *Node) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	staging := filepath.Clean(req.GetStagingTargetPath())
	n.mu.Lock()
	defer n.mu.Unlock()
	v := n.vols[req.GetVolumeId()]
	if v == nil {
		// Unstaged already (or never staged here): nothing to undo.
		return &csipb.NodeUnstageVolumeResponse{}, nil
	}
	if v.StagingPath != staging {
		return nil, status.Errorf(codes.FailedPrecondition, "node unstage: volume %s is staged at %s, not %s", v.VolumeID, v.StagingPath, staging)
	}
	for p := range v.Published {
		if m, err := n.os.MountPoint(p); err != nil {
			return nil, status.Errorf(codes.Internal, "node unstage: %v", err)
		} else if m {
			return nil, status.Errorf(codes.FailedPrecondition, "node unstage %s: still published at %s", v.VolumeID, p)
		}
	}
	if !v.Block {
		if m, err := n.os.MountPoint(staging); err != nil {
			return nil, status.Errorf(codes.Internal, "node unstage: %v", err)
		} else if m {
			if err := n.os.Unmount(staging); err != nil {
				return nil, status.Errorf(codes.Internal, "node unstage %s: %v", v.VolumeID, err)
			}
		}
	}
	if _, found, err := n.os.Volume(ctx, v.Name); err != nil {
		return nil, status.Errorf(codes.Internal, "node unstage %s: %v", v.VolumeID, err)
	} else if found && v.Device != "" {
		if busy, where := n.os.InUse(v.Device); busy {
			if !v.Block {
				// Mounted elsewhere too (a bind mount kept the filesystem):
				// put the staging mount back, so the state stays as it was.
				if err := n.os.Mount(v.Device, staging, v.FSType, false, v.ReadOnly); err != nil {
					n.log.Warn().Err(err).Str("volume_id", v.VolumeID).Msg("remount of the staging path after a refused unstage failed")
				}
			}
			return nil, status.Errorf(codes.FailedPrecondition, "node unstage %s: %s is in use (%s)", v.VolumeID, v.Device, where)
		}
	}
	if err := n.os.Detach(ctx, v.Name); err != nil {
		return nil, status.Errorf(codes.Internal, "node unstage %s: %v", v.VolumeID, err)
	}
	if err := n.remove(v); err != nil {
		return nil, status.Errorf(codes.Internal, "node unstage: %v", err)
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume bind-mounts the staging mount at the target path (a
// directory it creates), or in block mode the device onto a file it
// creates there; read-only when asked.
func (n *Node) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	block, fsType, modeRO, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	ro := req.GetReadonly() || modeRO
	target := filepath.Clean(req.GetTargetPath())
	n.mu.Lock()
	defer n.mu.Unlock()
	v := n.vols[req.GetVolumeId()]
	switch {
	case v == nil:
		return nil, status.Errorf(codes.NotFound, "node publish: volume %s is not staged on this node", req.GetVolumeId())
	case v.StagingPath != filepath.Clean(req.GetStagingTargetPath()):
		return nil, status.Errorf(codes.FailedPrecondition, "node publish: volume %s is staged at %s, not %s", v.VolumeID, v.StagingPath, req.GetStagingTargetPath())
	case v.Block != block || !block && v.FSType != fsType:
		return nil, status.Errorf(codes.AlreadyExists, "node publish: volume %s is staged with another capability (block %v, fsType %q)", v.VolumeID, v.Block, v.FSType)
	case v.Device == "":
		return nil, status.Errorf(codes.FailedPrecondition, "node publish: volume %s is not staged completely; stage it again", v.VolumeID)
	}
	for _, o := range n.vols {
		if _, ok := o.Published[target]; ok && o != v {
			return nil, status.Errorf(codes.AlreadyExists, "node publish: %s holds volume %s", target, o.VolumeID)
		}
	}
	if m, err := n.os.MountPoint(target); err != nil {
		return nil, status.Errorf(codes.Internal, "node publish: %v", err)
	} else if m {
		if was, ok := v.Published[target]; ok && was == ro {
			return &csipb.NodePublishVolumeResponse{}, nil
		}
		return nil, status.Errorf(codes.AlreadyExists, "node publish: %s is a mount point already (read-only asked: %v)", target, ro)
	}
	source := v.StagingPath
	if block {
		source = v.Device
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "node publish: %v", err)
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "node publish: %v", err)
		}
		f.Close()
	} else if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "node publish: %v", err)
	}
	if v.Published == nil {
		v.Published = map[string]bool{}
	}
	v.Published[target] = ro
	if err := n.save(v); err != nil {
		return nil, status.Errorf(codes.Internal, "node publish: %v", err)
	}
	if err := n.os.Mount(source, target, "", true, ro); err != nil {
		return nil, status.Errorf(codes.Internal, "node publish %s: %v", v.VolumeID, err)
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts the target path and removes it. A path that
// is no mount point is removed (when it exists) and the call succeeds.
func (n *Node) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	target := filepath.Clean(req.GetTargetPath())
	n.mu.Lock()
	defer n.mu.Unlock()
	v := n.vols[req.GetVolumeId()]
	_, ours := v.published(target)
	m, err := n.os.MountPoint(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node unpublish: %v", err)
	}
	if m {
		if !ours {
			return nil, status.Errorf(codes.FailedPrecondition, "node unpublish: %s is a mount point this plugin did not publish for volume %s", target, req.GetVolumeId())
		}
		if err := n.os.Unmount(target); err != nil {
			return nil, status.Errorf(codes.Internal, "node unpublish %s: %v", v.VolumeID, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "node unpublish: %v", err)
	}
	if ours {
		delete(v.Published, target)
		if err := n.save(v); err != nil {
			return nil, status.Errorf(codes.Internal, "node unpublish: %v", err)
		}
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (v *nodeVolume) published(target string) (readOnly, ok bool) {
	if v == nil {
		return false, false
	}
	readOnly, ok = v.Published[target]
	return readOnly, ok
}

// volumeAt finds the staged volume id whose staging path or a target path
// is path, or answers NotFound.
func (n *Node) volumeAt(op, id, path string) (*nodeVolume, error) {
	v := n.vols[id]
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "%s: volume %s is not staged on this node", op, id)
	}
	path = filepath.Clean(path)
	if _, ok := v.Published[path]; !ok && path != v.StagingPath {
		return nil, status.Errorf(codes.NotFound, "%s: volume %s is neither staged nor published at %s", op, id, path)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, status.Errorf(codes.NotFound, "%s: %v", op, err)
	}
	return v, nil
}

// NodeGetVolumeStats: bytes and inodes of a filesystem volume (statfs),
// the size of a block volume; the condition is abnormal while the
// volume's daemon is gone or has no usable path.
func (n *Node) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path missing")
	}
	n.mu.Lock()
	v, err := n.volumeAt("node volume stats", req.GetVolumeId(), req.GetVolumePath())
	var vc nodeVolume
	if v != nil {
		vc = *v
	}
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	cond := &csipb.VolumeCondition{}
	if av, found, err := n.os.Volume(ctx, vc.Name); err != nil {
		cond.Abnormal, cond.Message = true, err.Error()
	} else if !found {
		cond.Abnormal, cond.Message = true, "no iser-attach daemon serves "+vc.Name
	} else if why := av.Usable(); why != "" {
		cond.Abnormal, cond.Message = true, why
	} else {
		cond.Message = "attached"
	}
	resp := &csipb.NodeGetVolumeStatsResponse{VolumeCondition: cond}
	if vc.Block {
		size, err := n.os.DeviceSize(vc.Device)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "node volume stats %s: %v", vc.VolumeID, err)
		}
		resp.Usage = []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: size}}
		return resp, nil
	}
	s, err := n.os.Stats(filepath.Clean(req.GetVolumePath()))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node volume stats %s: %v", vc.VolumeID, err)
	}
	resp.Usage = []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: s.Bytes, Available: s.BytesAvailable, Used: s.BytesUsed},
		{Unit: csipb.VolumeUsage_INODES, Total: s.Inodes, Available: s.InodesFree, Used: s.InodesUsed},
	}
	return resp, nil
}

// NodeExpandVolume reads the LU's capacity again and grows the device to it
// (ublk with UBLK_F_UPDATE_SIZE; FAILED_PRECONDITION where the kernel
// lacks it), then grows the filesystem. A device that already has the
// required size is not resized.
func (n *Node) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path missing")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	v, err := n.volumeAt("node expand", req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	size, err := n.os.DeviceSize(v.Device)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node expand %s: %v", v.VolumeID, err)
	}
	if want := req.GetCapacityRange().GetRequiredBytes(); want == 0 || size < want {
		size, err = n.os.Resize(ctx, v.Name)
		if errors.Is(err, ErrNoResize) {
			return nil, status.Errorf(codes.FailedPrecondition, "node expand %s: %v", v.VolumeID, err)
		} else if err != nil {
			return nil, status.Errorf(codes.Internal, "node expand %s: %v", v.VolumeID, err)
		}
		if want > 0 && size < want {
			return nil, status.Errorf(codes.OutOfRange, "node expand %s: the LU has %d bytes, %d asked", v.VolumeID, size, want)
		}
	}
	if !v.Block {
		if err := n.os.GrowFS(ctx, v.Device, v.StagingPath, v.FSType); err != nil {
			return nil, status.Errorf(codes.Internal, "node expand %s: %v", v.VolumeID, err)
		}
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
