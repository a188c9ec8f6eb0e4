package main

import (
	"context"
	"fmt"

	"github.com/iser-attach/iser-attach/nbd"
	nbdkernel "github.com/iser-attach/iser-attach/nbd/kernel"
	"github.com/iser-attach/iser-attach/volume"
)

func init() {
	frontends["nbd"] = attachNBD
	frontendChecks["nbd"] = nbdkernel.Supported
}

type nbdDevice struct {
	d   *nbdkernel.Device
	srv *nbd.Server
}

func (n *nbdDevice) Path() string { return n.d.Path() }

func (n *nbdDevice) Detach(ctx context.Context) error {
	err := n.d.Detach(ctx)
	n.srv.Close()
	return err
}

// attachNBD serves the LUN to the kernel's NBD driver over in-process
// socket pairs: /dev/nbdN with FLUSH, FUA, TRIM and WRITE_ZEROES, or
// read-only.
func attachNBD(ctx context.Context, sp *attachSpec, b *volume.Counting, l *lunConn) (blockDevice, error) {
	if err := nbdkernel.Supported(ctx); err != nil {
		return nil, err
	}
	// Read-only: NBD_FLAG_READ_ONLY, which nbdkernel passes on to the
	// kernel, and the server refuses the writes that still come (EPERM).
	srv, err := nbd.NewServer([]nbd.Export{{Name: sp.Volume, Description: sp.Volume, Backend: b, ReadOnly: sp.ReadOnly}},
		nbd.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	d, err := nbdkernel.Attach(ctx, srv, sp.Volume, nbdkernel.Options{
		Index:       nbdkernel.AnyIndex,
		Connections: sp.NBDConnections,
		BlockSize:   l.Info().BlockSize,
		BackendID:   "iser-attach:" + sp.Volume,
		Logger:      logger,
	})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("nbd: %w", err)
	}
	l.OnWriteCacheChange(true, func(writeBack bool) bool {
		logger.Warn().Str("volume", sp.Volume).Str("device", d.Path()).Bool("write_back", writeBack).
			Msg("LUN write cache changed; kernel NBD keeps its connect-time flags until a re-attach, and FLUSH and FUA are always advertised, so flushes keep reaching the target")
		return true
	})
	return &nbdDevice{d: d, srv: srv}, nil
}
