package main

import (
	"context"
	"strings"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
)

// pickLUN returns the LUN to open: the spec's when it names one and that
// is a disk, else the target's lowest-numbered disk, said in one log line.
func pickLUN(ctx context.Context, nx initiator.Executor, sp *lunSpec, log zerolog.Logger) (uint16, error) {
	var want *uint16
	if !sp.AnyLUN {
		want = &sp.LUN
	}
	n, err := initiator.PickDiskLUN(ctx, nx, want)
	if err != nil {
		return 0, err
	}
	if sp.AnyLUN {
		log.Info().Uint16("lun", n).Msgf("no LUN given: using LUN %d, the target's lowest-numbered disk", n)
	}
	return n, nil
}

// defaultName is the volume name attach uses without --name:
// TARGET-lunN, or TARGET when no LUN was given.
func (sp *lunSpec) defaultName() string {
	if sp.AnyLUN {
		return strings.TrimSuffix(defaultVolumeName(sp.Target, 0), "-lun0")
	}
	return defaultVolumeName(sp.Target, uint(sp.LUN))
}
