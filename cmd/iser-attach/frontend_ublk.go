package main

import (
	"context"
	"fmt"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/ublk"
	"github.com/iser-attach/iser-attach/volume"
)

func init() { frontends["ublk"] = attachUblk }

// withBuffers lets ublk take its I/O buffers from the iSER datamover's
// registered memory: the target's RDMA moves data straight to and from
// the requests.
type withBuffers struct {
	*volume.Counting
	l *lunConn
}

func (w withBuffers) IOBuffers(count, size int) ([][]byte, error) { return w.l.IOBuffers(count, size) }

type ublkDevice struct {
	d    *ublk.Device
	name string
}

func (u *ublkDevice) Path() string { return u.d.BlockPath() }

func (u *ublkDevice) Detach(ctx context.Context) error {
	err := u.d.Stop(ctx)
	volume.RemoveState(u.name)
	return err
}

// attachUblk creates /dev/ublkbN for the LUN, or takes over the device a
// previous server of this volume left behind (ublk user recovery).
func attachUblk(ctx context.Context, sp *attachSpec, b *volume.Counting, l *lunConn) (blockDevice, error) {
	if err := ublk.Supported(); err != nil {
		return nil, err
	}
	info := l.Info()
	bs := uint64(info.BlockSize)
	opt := ublk.DeviceOptions{
		Queues:     sp.Queues,
		QueueDepth: min(sp.QueueDepth, 128),
		MaxIOBytes: initiator.MaxTransfer,
		WriteCache: info.WriteCache,
		FUA:        info.WriteCache && info.FUA,
		ReadOnly:   info.WriteProtected,
	}
	if info.Unmap {
		if n := uint64(info.Limits.MaxUnmapLBACount) * bs / 512; n > 0 && n < 1<<32 {
			opt.MaxDiscardSectors = uint32(n)
		}
		if g := uint64(info.Limits.OptimalUnmapGranularity) * bs; g > 0 && g < 1<<32 {
			opt.DiscardGranularity = uint32(g)
		}
	}
	if n := info.Limits.MaxWriteSameLength * bs / 512; n > 0 && n < 1<<32 {
		opt.MaxWriteZeroesSectors = uint32(n)
	}
	var backend ublk.Backend = b
	if l.nx.Status().Transport == initiator.TransportISER {
		backend = withBuffers{b, l}
	}
	if st, ok := volume.ReadState(sp.Volume); ok && st.Frontend == "ublk" {
		d, err := ublk.Recover(ctx, st.ID, backend, opt)
		if err == nil {
			logger.Warn().Str("volume", sp.Volume).Str("device", d.BlockPath()).Msg("took over the device left by a previous server (ublk recovery)")
			return &ublkDevice{d: d, name: sp.Volume}, nil
		}
		logger.Warn().Err(err).Int("id", st.ID).Str("volume", sp.Volume).Msg("ublk recovery failed; removing the old device")
		_ = ublk.Remove(ctx, st.ID)
		volume.RemoveState(sp.Volume)
	}
	d, err := ublk.Create(ctx, backend, opt)
	if err != nil {
		return nil, fmt.Errorf("ublk: %w", err)
	}
	if err := volume.WriteState(sp.Volume, volume.State{Frontend: "ublk", ID: d.ID(), Device: d.BlockPath()}); err != nil {
		logger.Warn().Err(err).Msg("ublk recovery will not find this device")
	}
	return &ublkDevice{d: d, name: sp.Volume}, nil
}
