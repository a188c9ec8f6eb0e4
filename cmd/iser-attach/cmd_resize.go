package main

// cmd_resize.go: "iser-attach resize NAME", and the automatic resize on
// UNIT ATTENTION 2A/09: the LUN's capacity read again and the ublk
// device's size set to it (UBLK_F_UPDATE_SIZE). The filesystem on the
// device is left to the administrator (resize2fs, xfs_growfs).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/ublk"
	"github.com/iser-attach/iser-attach/volume"
)

// resizableDevice is a frontend whose device size can change while it is
// served.
type resizableDevice interface {
	// CanResize says why the device cannot be resized, or nil.
	CanResize() error
	Resize(ctx context.Context, size int64) error
}

func (u *ublkDevice) CanResize() error {
	if u.d.Features()&ublk.FlagUpdateSize == 0 {
		return ublk.ErrNoResize
	}
	return nil
}

// Resize sets the device's size and records it in the volume's state file,
// whose LUN size the next attach's takeover checks.
func (u *ublkDevice) Resize(ctx context.Context, size int64) error {
	if err := u.d.Resize(ctx, size); err != nil {
		return err
	}
	return recordSize(u.name, size)
}

// recordSize updates the LUN size in the state file of volume name.
func recordSize(name string, size int64) error {
	st, ok := volume.ReadState(name)
	if !ok {
		return nil
	}
	st.LUN.Size = size
	if err := volume.WriteState(name, st); err != nil {
		return fmt.Errorf("record the new size: %w", err)
	}
	return nil
}

var errNoResizeFrontend = errors.New("the frontend cannot change the device's size (only ublk can)")

// resizer is what a volume's resize needs: the LUN (read its capacity
// again) and the device.
type resizer struct {
	rescan func(ctx context.Context) (oldSize, newSize int64, err error)
	dev    blockDevice
}

// resize reads the LUN's capacity again and sets the device's size to it.
// A frontend that cannot resize refuses before the LUN is read. Errors do
// not name the device: the caller (resize's reply) does.
func (r resizer) resize(ctx context.Context) (volume.Resize, error) {
	res := volume.Resize{Device: r.dev.Path()}
	rd, ok := r.dev.(resizableDevice)
	if !ok {
		return res, errNoResizeFrontend
	}
	if err := rd.CanResize(); err != nil {
		return res, err
	}
	oldSize, newSize, err := r.rescan(ctx)
	res.OldSize, res.NewSize = oldSize, newSize
	if err != nil {
		return res, err
	}
	return res, rd.Resize(ctx, newSize)
}

// followCapacity resizes the device when the LUN says its capacity changed
// (UNIT ATTENTION 2A/09), or says in the log why it cannot.
func (r resizer) followCapacity(onChange func(initiator.CapacityFunc), volumeName string) {
	onChange(func(oldSize, newSize int64) {
		log := logger.With().Str("volume", volumeName).Str("device", r.dev.Path()).
			Int64("old_size", oldSize).Int64("new_size", newSize).Logger()
		rd, ok := r.dev.(resizableDevice)
		err := errNoResizeFrontend
		if ok {
			err = rd.CanResize()
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = rd.Resize(ctx, newSize)
			cancel()
		}
		if err != nil {
			log.Warn().Err(err).Msg("the LUN's capacity changed (UNIT ATTENTION 2A/09) but the device keeps its size")
			return
		}
		log.Info().Msg("the LUN's capacity changed (UNIT ATTENTION 2A/09): device resized")
	})
}

// Resize implements volume.Resizer.
func (a *attached) Resize(ctx context.Context) (volume.Resize, error) {
	return resizer{rescan: a.lun.Rescan, dev: a.dev}.resize(ctx)
}

func resizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resize",
		Usage:     "read the LUN's capacity again and set the device's size to it (ublk on Linux >= 6.16); the filesystem is left as it is",
		ArgsUsage: "NAME|DEVICE",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageErrorf(c, "expected one NAME or DEVICE, got %d", c.NArg())
			}
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
			defer cancel()
			path, st, err := volume.Find(ctx, c.Args().First())
			if err != nil {
				return err
			}
			resp, err := volume.Query(ctx, path, volume.Request{Op: "resize"})
			if err != nil {
				return err
			}
			if !resp.OK || resp.Resize == nil {
				return fmt.Errorf("resize %s (%s): %s", st.Name, st.Device, resp.Error)
			}
			r := resp.Resize
			fmt.Fprintf(c.App.Writer, "%s (%s): %d -> %d bytes\n", st.Name, r.Device, r.OldSize, r.NewSize)
			return nil
		},
	}
}
