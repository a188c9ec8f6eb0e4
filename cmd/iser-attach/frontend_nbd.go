package main

import (
	"context"
	"fmt"
	"os"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/nbd"
	nbdkernel "github.com/iser-attach/iser-attach/nbd/kernel"
	"github.com/iser-attach/iser-attach/volume"
)

func init() {
	frontends["nbd"] = attachNBD
	frontendChecks["nbd"] = nbdkernel.Supported
}

type nbdDevice struct {
	d    *nbdkernel.Device
	srv  *nbd.Server
	name string
}

func (n *nbdDevice) Path() string { return n.d.Path() }

// Detach disconnects the device and forgets its state: a device the
// kernel still holds configured (open somewhere when ctx ended) is
// disconnected all the same, its sockets closed, and nothing would serve
// it again.
func (n *nbdDevice) Detach(ctx context.Context) error {
	err := n.d.Detach(ctx)
	n.srv.Close()
	volume.RemoveState(n.name)
	return err
}

// attachNBD serves the LUN to the kernel's NBD driver over in-process
// socket pairs: /dev/nbdN with FLUSH, FUA, TRIM and WRITE_ZEROES, or
// read-only.
func attachNBD(ctx context.Context, sp *attachSpec, b *counting.Backend, l *lunConn) (blockDevice, error) {
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
		BackendID:   nbdBackendID(sp.Volume),
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
	// The state names the device for a later detach, should this process
	// die without disconnecting it (the kernel keeps it configured).
	if err := volume.WriteState(sp.Volume, volume.State{Frontend: "nbd", ID: d.Index(), Device: d.Path(),
		PID: os.Getpid(), LUN: lunIdentity(sp.Target, l.Info())}); err != nil {
		logger.Warn().Err(err).Msg("a detach after a crash of this process will not find this device")
	}
	return &nbdDevice{d: d, srv: srv, name: sp.Volume}, nil
}

// releaseLeftNBD disconnects the kernel NBD device a previous server of
// volume name left configured (it died without disconnecting it: its
// sockets are closed, nothing can serve it again, and its I/O fails), so
// that attach does not leave it behind next to the new device. A device
// in use (in any mount namespace, or when that cannot be told) stays: the
// attach goes on with another device and says how to remove that one.
// The caller holds the volume's attach lock.
func releaseLeftNBD(ctx context.Context, name string) {
	st, ok := volume.ReadState(name)
	if !ok || st.Frontend != "nbd" {
		return
	}
	left, ok := leftDeviceOf(name, st)
	if !ok {
		return
	}
	log := logger.With().Str("volume", name).Str("device", left.path).Logger()
	if busy, where := volume.InUse(left.path); busy {
		log.Warn().Str("in_use", where).Msg("a previous server of the volume left this nbd device configured, and it is in use: it stays " +
			"(its I/O fails); unmount it, then `nbd-client -d` it")
		return
	}
	if err := left.remove(ctx); err != nil {
		log.Warn().Err(err).Msg("could not disconnect the nbd device a previous server of the volume left")
		return
	}
	volume.RemoveState(name)
	log.Info().Msg("disconnected the nbd device a previous server of the volume left")
}
