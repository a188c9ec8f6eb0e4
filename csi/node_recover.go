package csi

import (
	"context"
	"sort"
	"time"
)

// This file holds what a starting node plugin does for the volumes an
// earlier one staged whose attach daemon is gone.

// Recover attaches again every staged volume whose daemon does not answer
// (it died, or a container restart ended it with the plugin). attach takes
// over a ublk device left behind (user recovery): the staging mount and
// the pods' bind mounts go on over the same device, their I/O having
// waited in the kernel meanwhile. Each attach gets timeout. A volume that
// cannot be attached, or that comes back as another device (kernel NBD,
// or a ublk device that was removed), is logged as an error and left to
// the next NodeStageVolume or NodeUnstageVolume. It returns how many
// volumes it attached again, and runs before the plugin serves.
func (n *Node) Recover(ctx context.Context, timeout time.Duration) int {
	n.mu.Lock()
	vols := make([]nodeVolume, 0, len(n.vols))
	for _, v := range n.vols {
		vols = append(vols, *v)
	}
	n.mu.Unlock()
	sort.Slice(vols, func(i, j int) bool { return vols[i].Name < vols[j].Name })
	done := 0
	for _, v := range vols {
		log := n.log.With().Str("volume_id", v.VolumeID).Str("name", v.Name).Str("device", v.Device).Logger()
		if _, found, err := n.os.Volume(ctx, v.Name); err != nil || found {
			if err != nil {
				log.Warn().Err(err).Msg("recover: the daemon's status")
			}
			continue
		}
		id, err := ParseVolumeID(v.VolumeID)
		if err != nil {
			log.Error().Err(err).Msg("recover: the record's volume ID")
			continue
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		t0 := time.Now()
		dev, err := n.os.Attach(actx, v.Name, id, v.ReadOnly)
		cancel()
		took := time.Since(t0)
		switch {
		case err != nil:
			log.Error().Err(err).Dur("took", took).Msg("recover: the volume's daemon is gone and attaching it again failed; its I/O waits or fails until a stage or unstage")
		case v.Device != "" && dev != v.Device:
			log.Error().Str("new_device", dev).Dur("took", took).Msg("recover: attached again as another device: the mounts on the old one stay broken; unstage and stage again")
		default:
			done++
			log.Warn().Dur("took", took).Msg("recover: the volume's daemon was gone; attached again and took its device over")
		}
	}
	return done
}
