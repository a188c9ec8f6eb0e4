package csi

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// LU is one disk LU of the pool as the scan found it.
type LU struct {
	LUN       uint16
	Size      int64  // bytes (READ CAPACITY)
	BlockSize uint32 // logical block size
	LUID      string // VPD 0x83 name: naa., eui. or t10.
}

// Controller is the CSI Controller service for one target's LUs. Its
// methods are safe for concurrent use: one mutex orders every call that
// reads or changes the allocations, and each change is on disk (Store)
// before the call answers.
type Controller struct {
	csipb.UnimplementedControllerServer

	target string
	log    zerolog.Logger

	// Wipe, when set before serving, zeroes a volume's LU before
	// DeleteVolume frees it (--wipe-on-delete); it must check that lun is
	// still the LU luid.
	Wipe func(ctx context.Context, lun uint16, luid string) error

	mu     sync.Mutex
	wiping map[string]*wipeOp // by volume ID
	store  *Store
	lus    []LU                   // by size, then LUN
	vols   map[string]*Allocation // by name
	byID   map[string]*Allocation // by volume ID
	taken  map[uint16]*Allocation // by LUN
}

// NewController serves target's LUs lus, with the allocations of store.
// An allocation whose LU is no longer in lus under the same LUN and
// identity is kept (its LUN is not handed out again) and logged.
func NewController(target string, lus []LU, store *Store, log zerolog.Logger) (*Controller, error) {
	st, err := store.load()
	if err != nil {
		return nil, fmt.Errorf("csi controller: %w", err)
	}
	if st.Target != "" && st.Target != target {
		return nil, fmt.Errorf("csi controller: state directory %s holds target %s's volumes, the pool is %s", store.Dir(), st.Target, target)
	}
	c := &Controller{target: target, log: log, store: store, vols: map[string]*Allocation{}, wiping: map[string]*wipeOp{},
		byID: map[string]*Allocation{}, taken: map[uint16]*Allocation{}}
	for _, l := range lus {
		if err := CheckLUID(l.LUID); err != nil {
			log.Warn().Uint16("lun", l.LUN).Err(err).Msg("LUN left out of the pool: its identity cannot stand in a volume ID")
			continue
		}
		if l.Size <= 0 {
			log.Warn().Uint16("lun", l.LUN).Msg("LUN left out of the pool: no capacity")
			continue
		}
		c.lus = append(c.lus, l)
	}
	sort.Slice(c.lus, func(i, j int) bool {
		a, b := c.lus[i], c.lus[j]
		return a.Size < b.Size || a.Size == b.Size && a.LUN < b.LUN
	})
	for i := range st.Volumes {
		a := st.Volumes[i]
		c.vols[a.Name], c.byID[a.VolumeID], c.taken[a.LUN] = &a, &a, &a
		if l, ok := c.lu(a.LUN); !ok || l.LUID != a.LUID {
			log.Warn().Str("volume", a.Name).Uint16("lun", a.LUN).Str("luid", a.LUID).
				Msg("volume's LU is not in the pool as recorded: the LUN stays taken until the volume is deleted")
		}
	}
	log.Info().Str("target", target).Int("luns", len(c.lus)).Int("volumes", len(c.vols)).Msg("pool scanned")
	return c, nil
}

func (c *Controller) lu(n uint16) (LU, bool) {
	for _, l := range c.lus {
		if l.LUN == n {
			return l, true
		}
	}
	return LU{}, false
}

// saveLocked writes the allocations; c.mu is held.
func (c *Controller) saveLocked() error {
	st := &stateFile{Version: stateVersion, Target: c.target}
	for _, a := range c.vols {
		st.Volumes = append(st.Volumes, *a)
	}
	sort.Slice(st.Volumes, func(i, j int) bool { return st.Volumes[i].Name < st.Volumes[j].Name })
	return c.store.save(st)
}

// ControllerGetCapabilities: create/delete, list, capacity, expand.
func (c *Controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCapabilities returns why caps cannot be served, "" when they can: the
// node's rule (checkCapability) for each, so the controller never hands out
// a volume the node then refuses, nor refuses one it would stage.
func checkCapabilities(caps []*csipb.VolumeCapability) string {
	for _, vc := range caps {
		if _, _, _, err := checkCapability(vc); err != nil {
			return status.Convert(err).Message()
		}
	}
	return ""
}

// checkParameters refuses every parameter: the pool has one kind of LUN.
func checkParameters(p map[string]string) error {
	for k := range p {
		return status.Errorf(codes.InvalidArgument, "parameter %q: this driver takes no parameters", k)
	}
	return nil
}

// fits says whether an LU of size bytes satisfies the capacity range.
func fits(size int64, r *csipb.CapacityRange) bool {
	return size >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || size <= r.GetLimitBytes())
}

func checkRange(r *csipb.CapacityRange) error {
	if r.GetRequiredBytes() < 0 || r.GetLimitBytes() < 0 {
		return status.Error(codes.InvalidArgument, "capacity range: negative bytes")
	}
	if r.GetLimitBytes() != 0 && r.GetLimitBytes() < r.GetRequiredBytes() {
		return status.Errorf(codes.InvalidArgument, "capacity range: limit %d below required %d", r.GetLimitBytes(), r.GetRequiredBytes())
	}
	return nil
}

func (c *Controller) volume(a *Allocation) *csipb.Volume {
	return &csipb.Volume{VolumeId: a.VolumeID, CapacityBytes: a.Capacity, VolumeContext: map[string]string{
		"target": c.target, "lun": strconv.Itoa(int(a.LUN)), "luid": a.LUID}}
}

// CreateVolume gives the name the smallest free LU within the capacity
// range (lowest LUN among equals), or the LU it has already.
func (c *Controller) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	name := req.GetName()
	switch {
	case name == "":
		return nil, status.Error(codes.InvalidArgument, "name missing")
	case len(req.GetVolumeCapabilities()) == 0:
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	case req.GetVolumeContentSource() != nil:
		return nil, status.Error(codes.InvalidArgument, "volume content source: snapshots and clones are not supported")
	}
	if why := checkCapabilities(req.GetVolumeCapabilities()); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	if err := checkParameters(req.GetParameters()); err != nil {
		return nil, err
	}
	r := req.GetCapacityRange()
	if err := checkRange(r); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.vols[name]; ok {
		if c.wiping[a.VolumeID] != nil {
			return nil, status.Errorf(codes.Aborted, "volume %q is being deleted (its LU is being wiped)", name)
		}
		if !fits(a.Capacity, r) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes (LUN %d), outside the range asked for (required %d, limit %d)",
				name, a.Capacity, a.LUN, r.GetRequiredBytes(), r.GetLimitBytes())
		}
		return &csipb.CreateVolumeResponse{Volume: c.volume(a)}, nil
	}
	inRange := 0
	for _, l := range c.lus {
		if !fits(l.Size, r) {
			continue
		}
		inRange++
		if c.taken[l.LUN] != nil {
			continue
		}
		a := &Allocation{Name: name, VolumeID: VolumeID{Target: c.target, LUN: l.LUN, LUID: l.LUID}.String(),
			LUN: l.LUN, LUID: l.LUID, Capacity: l.Size, Created: time.Now().UTC()}
		c.vols[name], c.byID[a.VolumeID], c.taken[l.LUN] = a, a, a
		if err := c.saveLocked(); err != nil {
			delete(c.vols, name)
			delete(c.byID, a.VolumeID)
			delete(c.taken, l.LUN)
			return nil, status.Errorf(codes.Internal, "create volume %q: %v", name, err)
		}
		c.log.Info().Str("volume", name).Uint16("lun", l.LUN).Int64("bytes", l.Size).Str("volume_id", a.VolumeID).Msg("volume created")
		return &csipb.CreateVolumeResponse{Volume: c.volume(a)}, nil
	}
	if inRange == 0 {
		return nil, status.Errorf(codes.OutOfRange, "no LUN of the pool has a size within required %d, limit %d bytes (sizes: %s)",
			r.GetRequiredBytes(), r.GetLimitBytes(), c.sizesLocked())
	}
	return nil, status.Errorf(codes.ResourceExhausted, "all %d LUNs of the pool within required %d, limit %d bytes are taken",
		inRange, r.GetRequiredBytes(), r.GetLimitBytes())
}

// sizesLocked lists the pool's LU sizes, for errors.
func (c *Controller) sizesLocked() string {
	var s []string
	for _, l := range c.lus {
		s = append(s, strconv.FormatInt(l.Size, 10))
	}
	if len(s) == 0 {
		return "the pool is empty"
	}
	return strings.Join(slices.Compact(s), ", ")
}

// DeleteVolume frees the volume's LU, after wiping it when c.Wipe is set;
// an unknown ID is already deleted.
func (c *Controller) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	c.mu.Lock()
	a, ok := c.byID[id]
	if !ok {
		c.mu.Unlock()
		return &csipb.DeleteVolumeResponse{}, nil
	}
	if c.Wipe == nil {
		defer c.mu.Unlock()
		if err := c.freeLocked(a); err != nil {
			return nil, status.Errorf(codes.Internal, "delete volume %s: %v", id, err)
		}
		return &csipb.DeleteVolumeResponse{}, nil
	}
	op := c.wiping[id]
	if op == nil {
		op = &wipeOp{done: make(chan struct{})}
		c.wiping[id] = op
		go c.wipe(a, op)
	}
	c.mu.Unlock()
	select {
	case <-op.done:
		if op.err != nil {
			return nil, status.Errorf(codes.Internal, "delete volume %s: %v", id, op.err)
		}
		return &csipb.DeleteVolumeResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// wipeOp is a wipe in progress: DeleteVolume calls for the volume wait
// for it; err is set before done closes.
type wipeOp struct {
	done chan struct{}
	err  error
}

// wipeTimeout bounds one wipe. It runs apart from the DeleteVolume call
// that started it (whose deadline may be seconds), so a retry finds it
// finished or joins it.
const wipeTimeout = time.Hour

// wipe zeroes a's LU, then frees it; on failure the volume stays and the
// next DeleteVolume wipes again.
func (c *Controller) wipe(a *Allocation, op *wipeOp) {
	ctx, cancel := context.WithTimeout(context.Background(), wipeTimeout)
	defer cancel()
	start := time.Now()
	err := c.Wipe(ctx, a.LUN, a.LUID)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.wiping, a.VolumeID)
	if err != nil {
		op.err = fmt.Errorf("wipe LUN %d: %w", a.LUN, err)
		c.log.Warn().Str("volume", a.Name).Uint16("lun", a.LUN).Err(err).Msg("wipe failed: the volume stays until a DeleteVolume wipes it")
	} else {
		c.log.Info().Str("volume", a.Name).Uint16("lun", a.LUN).Dur("took", time.Since(start)).Msg("LU wiped")
		op.err = c.freeLocked(a)
	}
	close(op.done)
}

// freeLocked forgets a and writes the state; c.mu is held.
func (c *Controller) freeLocked(a *Allocation) error {
	delete(c.vols, a.Name)
	delete(c.byID, a.VolumeID)
	delete(c.taken, a.LUN)
	if err := c.saveLocked(); err != nil {
		c.vols[a.Name], c.byID[a.VolumeID], c.taken[a.LUN] = a, a, a
		return err
	}
	c.log.Info().Str("volume", a.Name).Uint16("lun", a.LUN).Str("volume_id", a.VolumeID).Msg("volume deleted")
	return nil
}

// ValidateVolumeCapabilities confirms the capabilities checkCapabilities
// accepts.
func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case len(req.GetVolumeCapabilities()) == 0:
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	c.mu.Lock()
	_, ok := c.byID[req.GetVolumeId()]
	c.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if why := checkCapabilities(req.GetVolumeCapabilities()); why != "" {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: why}, nil
	}
	if err := checkParameters(req.GetParameters()); err != nil {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

// listToken is a ListVolumes starting token: "after:" and the hex of the
// last name returned. The next page starts after that name, so a volume
// deleted or added between pages neither repeats nor shifts an entry.
const listToken = "after:"

// ListVolumes lists the volumes by name, max_entries at a time.
func (c *Controller) ListVolumes(ctx context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries is negative")
	}
	after := ""
	if t := req.GetStartingToken(); t != "" {
		h, ok := strings.CutPrefix(t, listToken)
		b, err := hex.DecodeString(h)
		if !ok || err != nil || len(b) == 0 {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one this controller gave", t)
		}
		after = string(b)
	}
	c.mu.Lock()
	names := make([]string, 0, len(c.vols))
	for n := range c.vols {
		if after == "" || n > after {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	resp := &csipb.ListVolumesResponse{}
	for i, n := range names {
		if m := int(req.GetMaxEntries()); m > 0 && i == m {
			resp.NextToken = listToken + hex.EncodeToString([]byte(names[m-1]))
			break
		}
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{Volume: c.volume(c.vols[n])})
	}
	c.mu.Unlock()
	return resp, nil
}

// GetCapacity is the bytes of the free LUs that suit the capabilities
// asked for (all when none are given); maximum_volume_size the largest
// of them, minimum_volume_size the smallest LU of the pool.
func (c *Controller) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	if err := checkParameters(req.GetParameters()); err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) > 0 && checkCapabilities(req.GetVolumeCapabilities()) != "" {
		return &csipb.GetCapacityResponse{}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &csipb.GetCapacityResponse{}
	for _, l := range c.lus {
		if c.taken[l.LUN] != nil {
			continue
		}
		resp.AvailableCapacity += l.Size
		resp.MaximumVolumeSize = wrapperspb.Int64(max(l.Size, resp.MaximumVolumeSize.GetValue()))
	}
	if len(c.lus) > 0 {
		resp.MinimumVolumeSize = wrapperspb.Int64(c.lus[0].Size)
	}
	return resp, nil
}

// ControllerExpandVolume: a volume is its whole LU from the start, so it
// can grow up to the LU's size and no further (OUT_OF_RANGE); the node
// still has to grow its filesystem.
func (c *Controller) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetCapacityRange() == nil:
		return nil, status.Error(codes.InvalidArgument, "capacity range missing")
	}
	r := req.GetCapacityRange()
	if err := checkRange(r); err != nil {
		return nil, err
	}
	if vc := req.GetVolumeCapability(); vc != nil {
		if why := checkCapabilities([]*csipb.VolumeCapability{vc}); why != "" {
			return nil, status.Error(codes.InvalidArgument, why)
		}
	}
	c.mu.Lock()
	a, ok := c.byID[req.GetVolumeId()]
	c.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if !fits(a.Capacity, r) {
		return nil, status.Errorf(codes.OutOfRange, "volume %q is LUN %d of %d bytes, the whole LU: it cannot be made %d bytes (limit %d)",
			a.Name, a.LUN, a.Capacity, r.GetRequiredBytes(), r.GetLimitBytes())
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: a.Capacity, NodeExpansionRequired: true}, nil
}
