package nbd

import (
	"context"
	"fmt"
	"net"
)

// Entry points for clients that skip the handshake. The Linux nbd driver,
// configured over generic netlink (package nbd/kernel), is handed sockets
// that are already in the transmission phase: whoever configures it learns
// the export's size, block size and transmission flags here, tells the
// kernel, and serves each socket with ServeTransmission.

// ExportInfo is what NBD_OPT_GO would tell a client about an export.
type ExportInfo struct {
	// Name is the export's name (the default export resolved).
	Name string
	// Size in bytes (NBD_INFO_EXPORT).
	Size int64
	// BlockSize, PreferredBlockSize and MaxBlockSize are the minimum,
	// preferred and maximum block sizes of NBD_INFO_BLOCK_SIZE.
	BlockSize          uint32
	PreferredBlockSize uint32
	MaxBlockSize       uint32
	// TransmissionFlags are the NBD_FLAG_* transmission flags
	// (NBD_FLAG_HAS_FLAGS, NBD_FLAG_SEND_FLUSH, ...).
	TransmissionFlags uint16
}

// Transmission flags a handshake-less client is told out of band; the
// values are those of proto.md (and of the Linux uapi nbd.h).
const (
	FlagHasFlags        = flagHasFlags
	FlagReadOnly        = flagReadOnly
	FlagSendFlush       = flagSendFlush
	FlagSendFUA         = flagSendFUA
	FlagRotational      = flagRotational
	FlagSendTrim        = flagSendTrim
	FlagSendWriteZeroes = flagSendWriteZeroes
	FlagCanMultiConn    = flagCanMultiConn
)

// ExportInfo looks an export up by name ("" selects the default export, as
// in the handshake) and reports its geometry and transmission flags.
func (s *Server) ExportInfo(name string) (ExportInfo, error) {
	e, ok := s.lookup(name)
	if !ok {
		return ExportInfo{}, fmt.Errorf("nbd export info: unknown export %q", name)
	}
	g, err := e.geometry()
	if err != nil {
		return ExportInfo{}, fmt.Errorf("nbd export info: export %q: %w", name, err)
	}
	return ExportInfo{
		Name:               e.Name,
		Size:               g.size,
		BlockSize:          g.minBlock,
		PreferredBlockSize: g.prefBlock,
		MaxBlockSize:       g.maxBlock,
		TransmissionFlags:  g.flags,
	}, nil
}

// ServeTransmission serves nc, a connection whose client will not
// negotiate: it starts directly in the transmission phase on the named
// export, exactly as after NBD_OPT_GO. It runs on the caller's goroutine
// and returns when the connection has ended, with the socket closed:
//
//   - nil after NBD_CMD_DISC, or when the client hung up between requests,
//     or when the connection was stopped (ctx cancelled, Shutdown, Close);
//   - ErrServerClosed if the server was already closed (nc is closed);
//   - otherwise the error that ended the connection, such as a broken
//     request stream or a failed reply write (a client that shut its socket
//     down with requests in flight gives EPIPE or ECONNRESET here).
//
// The connection counts as one of the server's: Shutdown waits for it and
// Close ends it. Cancelling ctx stops reading requests; those already read
// are answered first, as with Serve's ctx.
func (s *Server) ServeTransmission(ctx context.Context, nc net.Conn, export string) error {
	e, ok := s.lookup(export)
	if !ok {
		nc.Close()
		return fmt.Errorf("nbd serve transmission: unknown export %q", export)
	}
	g, err := e.geometry()
	if err != nil {
		nc.Close()
		return fmt.Errorf("nbd serve transmission: export %q: %w", export, err)
	}
	c := newConn(s, s.base, nc)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.unhook()
		c.cancel()
		nc.Close()
		return ErrServerClosed
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	defer context.AfterFunc(ctx, c.stopReading)()
	return c.serveTransmission(e, g)
}

// serveTransmission is serve without the handshake.
func (c *conn) serveTransmission(e *Export, g geometry) error {
	defer c.cancel()
	defer c.unhook()
	defer c.nc.Close()
	if c.stopping.Load() {
		return nil
	}
	c.exp, c.geo = e, g
	c.log = c.log.With().Str("export", e.Name).Logger()
	c.log.Info().Int64("size", g.size).Uint32("block_size", g.minBlock).
		Bool("read_only", g.readOnly).Msg("nbd transmission-only client attached")
	err := c.transmit()
	switch {
	case err == nil:
		c.log.Info().Msg("nbd transmission-only client disconnected")
	case c.stopping.Load() && clientGone(err):
		c.log.Debug().Err(err).Msg("nbd connection closed by server shutdown")
		err = nil
	default:
		c.log.Warn().Err(err).Msg("nbd connection ended")
		err = fmt.Errorf("nbd serve transmission: %w", err)
	}
	return err
}
