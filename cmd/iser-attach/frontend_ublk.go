package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/ublk"
	"github.com/iser-attach/iser-attach/volume"
)

func init() {
	frontends["ublk"] = attachUblk
	frontendChecks["ublk"] = func(context.Context) error { return ublk.Supported() }
}

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

// Leave stops serving the device but leaves it, and its state file, for
// the next attach of the volume (ublk user recovery): I/O waits in the
// kernel meanwhile. It returns within ublk.DetachTimeout: requests whose
// LUN commands have not ended by then are abandoned, never completed, and
// the next server gets them again.
func (u *ublkDevice) Leave() error { return u.d.Detach() }

// attachUblk creates /dev/ublkbN for the LUN, or takes over the device a
// previous server of this volume left behind (ublk user recovery).
func attachUblk(ctx context.Context, sp *attachSpec, b *counting.Backend, l *lunConn) (blockDevice, error) {
	if err := ublk.Supported(); err != nil {
		return nil, err
	}
	info := l.Info()
	bs := uint64(info.BlockSize)
	opt := ublk.DeviceOptions{
		Queues:     sp.Queues,
		QueueDepth: min(sp.QueueDepth, 128),
		MaxIOBytes: initiator.MaxTransfer,
		// Always a volatile cache, set to the LUN's mode through sysfs
		// (followWriteCache): since Linux 6.11 write_cache can turn a
		// device write-back only when it was created with the capability.
		WriteCache: true,
		FUA:        info.FUA,
		// Read-only: UBLK_ATTR_READ_ONLY, and the queues end writes,
		// discards and write-zeroes with EROFS.
		ReadOnly: info.WriteProtected || sp.ReadOnly,
		// Batch I/O where the kernel has it (Linux >= 7.0);
		// ISER_ATTACH_UBLK_BATCH=0 serves one request per command, to
		// compare the two.
		NoBatch: os.Getenv("ISER_ATTACH_UBLK_BATCH") == "0",
	}
	if info.Unmap && !opt.ReadOnly {
		if n := uint64(info.Limits.MaxUnmapLBACount) * bs / 512; n > 0 && n < 1<<32 {
			opt.MaxDiscardSectors = uint32(n)
		}
		if g := uint64(info.Limits.OptimalUnmapGranularity) * bs; g > 0 && g < 1<<32 {
			opt.DiscardGranularity = uint32(g)
		}
	}
	if n := info.Limits.MaxWriteSameLength * bs / 512; n > 0 && n < 1<<32 && !opt.ReadOnly {
		opt.MaxWriteZeroesSectors = uint32(n)
	}
	// ublk finds the LUN's capabilities behind the counting backend (blockdev.As):
	// its I/O buffers come from the Nexus's registered memory over iSER,
	// so the target's RDMA moves data straight to and from the requests;
	// over TCP, or several paths, the LUN gives none and ublk maps its own.
	ident := lunIdentity(sp.Target, info)
	if st, ok := volume.ReadState(sp.Volume); ok && st.Frontend == "ublk" {
		d, err := recoverUblk(ctx, sp.Volume, st, ident, b, opt)
		if u, ok := d.(*ublkDevice); ok {
			followWriteCache(l, u.d, sp.Volume)
		}
		if d != nil || err != nil {
			return d, err
		}
	}
	d, err := ublk.Create(ctx, b, opt)
	if err != nil {
		return nil, fmt.Errorf("ublk: %w", err)
	}
	setIOScheduler(d, sp)
	if err := volume.WriteState(sp.Volume, volume.State{Frontend: "ublk", ID: d.ID(), Device: d.BlockPath(),
		PID: os.Getpid(), LUN: ident}); err != nil {
		logger.Warn().Err(err).Msg("ublk recovery will not find this device")
	}
	followWriteCache(l, d, sp.Volume)
	return &ublkDevice{d: d, name: sp.Volume}, nil
}

// ioSchedulerFlag is --io-scheduler of attach and volume add.
func ioSchedulerFlag(def string) cli.Flag {
	return &cli.StringFlag{Name: "io-scheduler", Value: def,
		Usage: "ublk: a new device's I/O scheduler (none, mq-deadline, kyber, bfq), or keep: the kernel's (mq-deadline)"}
}

// setIOScheduler gives a new device the volume's I/O scheduler; a takeover
// keeps the device's. A scheduler the kernel lacks, or a read-only /sys,
// leaves the kernel's, with a warning.
func setIOScheduler(d *ublk.Device, sp *attachSpec) {
	if sp.IOScheduler == "keep" || sp.IOScheduler == "" {
		return
	}
	if active, err := d.SetScheduler(sp.IOScheduler); err != nil {
		logger.Warn().Err(err).Str("volume", sp.Volume).Str("device", d.BlockPath()).Str("scheduler", active).
			Msg("the device keeps the kernel's I/O scheduler")
	}
}

// lunIdentity is what the state file records of the LUN, target's LUN.
func lunIdentity(target string, info initiator.LUNInfo) volume.Identity {
	return volume.Identity{WWN: info.WWN, Serial: info.Serial, Size: info.Size(), BlockSize: info.BlockSize,
		Target: target, Number: info.Number}
}

// recoverUblk takes over the device st records, left by a previous server
// of the volume. It returns (nil, nil) when there is no such device any
// more, or it could remove it, and a new one is to be created. It never
// removes a device another live process serves, one that is mounted, held
// or open, or one that shows another LUN: it fails, leaving it alone.
func recoverUblk(ctx context.Context, name string, st volume.State, ident volume.Identity, b ublk.Backend,
	opt ublk.DeviceOptions) (blockDevice, error) {
	dev := ublk.BlockPath(st.ID)
	if err := st.LUN.Check(ident); err != nil {
		return nil, fmt.Errorf("volume %s: not taking over %s: %w (remove it, and %s, once nothing uses it)",
			name, dev, err, volume.StatePath(name))
	}
	d, err := ublk.Recover(ctx, st.ID, b, opt)
	if err == nil {
		if err := volume.WriteState(name, volume.State{Frontend: "ublk", ID: d.ID(), Device: d.BlockPath(),
			PID: os.Getpid(), LUN: ident}); err != nil {
			logger.Warn().Err(err).Msg("ublk recovery will not find this device")
		}
		logger.Warn().Str("volume", name).Str("device", d.BlockPath()).Msg("took over the device left by a previous server (ublk recovery)")
		return &ublkDevice{d: d, name: name}, nil
	}
	if errors.Is(err, ublk.ErrServed) {
		return nil, fmt.Errorf("volume %s: %w", name, err)
	}
	if errors.Is(err, syscall.ENODEV) {
		logger.Info().Int("id", st.ID).Str("volume", name).Msg("the recorded ublk device is gone; creating a new one")
		volume.RemoveState(name)
		return nil, nil
	}
	return nil, afterFailedRecovery(ctx, name, dev, st.ID, err, ublk.Remove)
}

// afterFailedRecovery decides the fate of a left ublk device (dev, id)
// whose recovery failed with err. In use anywhere, in any mount namespace,
// or when that cannot be told, it stays and the attach fails. Otherwise it
// is removed (remove) and the volume's state forgotten: nil, and the
// attach goes on with a new device.
func afterFailedRecovery(ctx context.Context, name, dev string, id int, err error, remove func(context.Context, int) error) error {
	if busy, where := volume.InUse(dev); busy {
		return fmt.Errorf("volume %s: ublk recovery of %s failed and it is in use (%s), so it stays: %w",
			name, dev, where, err)
	}
	logger.Warn().Err(err).Int("id", id).Str("volume", name).Msg("ublk recovery failed; removing the old device (not in use)")
	if rerr := remove(ctx, id); rerr != nil && !errors.Is(rerr, syscall.ENODEV) {
		return fmt.Errorf("volume %s: ublk recovery of %s failed (%w) and so did its removal: %w", name, dev, err, rerr)
	}
	volume.RemoveState(name)
	return nil
}
