package nbd

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// conn is one client connection. Its serve method runs on the goroutine
// Serve starts, and is the reader: it does the handshake, then reads
// requests and starts a worker goroutine per accepted request. A writer
// goroutine, started by serve, owns the socket's write side in the
// transmission phase. See doc.go for the shutdown order.
type conn struct {
	srv *Server
	nc  net.Conn
	log zerolog.Logger
	br  *bufio.Reader
	bw  *bufio.Writer

	ctx    context.Context // passed to the Backend; cancelled by Close
	cancel context.CancelFunc
	unhook func() bool // removes the ctx AfterFunc

	stopOnce sync.Once
	stopping atomic.Bool
	stopCh   chan struct{} // closed when the reader must stop

	wdMu sync.Mutex // orders armWrite against hardStop
	hard bool       // hardStop ran: its short write deadline stays

	// Transmission phase.
	exp     *Export
	geo     geometry
	budget  *budget
	replies chan reply
	workers sync.WaitGroup
	jobs    chan job // to idle workers
}

// reply is one simple reply on its way to the writer.
type reply struct {
	handle uint64
	errno  uint32
	data   []byte  // READ payload, only when errno == 0
	buf    *[]byte // pooled buffer to recycle after writing, may be nil
	cost   int64   // payload bytes to return to the budget
}

func newConn(s *Server, parent context.Context, nc net.Conn) *conn {
	c := &conn{
		srv:    s,
		nc:     nc,
		log:    s.log.With().Str("remote", nc.RemoteAddr().String()).Logger(),
		br:     bufio.NewReaderSize(nc, 64<<10),
		bw:     bufio.NewWriterSize(nc, 64<<10),
		stopCh: make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(parent)
	c.unhook = context.AfterFunc(c.ctx, c.hardStop)
	return c
}

// stopReading makes the reader stop at its next (or current) read. The flag
// is set before the deadline so that a reader which clears its deadline and
// then checks the flag cannot miss both.
func (c *conn) stopReading() {
	c.stopOnce.Do(func() {
		c.stopping.Store(true)
		close(c.stopCh)
		c.nc.SetReadDeadline(time.Unix(1, 0))
	})
}

// hardStop runs when the connection's context is cancelled (Close, or
// Serve's ctx): stop reading, and give the writer a bounded time to deliver
// the remaining replies.
func (c *conn) hardStop() {
	c.stopReading()
	c.wdMu.Lock()
	defer c.wdMu.Unlock()
	c.hard = true
	c.nc.SetWriteDeadline(time.Now().Add(closeWriteGrace))
}

// armWrite gives the next reply IOTimeout to reach the socket, unless
// hardStop already set its shorter grace.
func (c *conn) armWrite() {
	c.wdMu.Lock()
	defer c.wdMu.Unlock()
	if !c.hard {
		c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.IOTimeout))
	}
}

// serve runs the connection to its end and closes the socket.
func (c *conn) serve() {
	defer c.cancel()
	defer c.unhook()
	defer c.nc.Close()
	c.log.Debug().Msg("nbd connection open")

	c.nc.SetDeadline(time.Now().Add(c.srv.opts.HandshakeTimeout))
	if c.stopping.Load() {
		return
	}
	exp, g, err := c.handshake()
	if err != nil {
		if c.stopping.Load() || clientGone(err) {
			c.log.Debug().Err(err).Msg("nbd handshake ended early")
		} else {
			c.log.Warn().Err(err).Msg("nbd handshake failed")
		}
		return
	}
	if exp == nil {
		c.log.Debug().Msg("nbd client aborted option haggling")
		return
	}
	c.nc.SetDeadline(time.Time{})
	if c.stopping.Load() {
		return
	}
	c.exp, c.geo = exp, g
	c.log = c.log.With().Str("export", exp.Name).Logger()
	c.log.Info().Int64("size", g.size).Uint32("block_size", g.minBlock).
		Bool("read_only", g.readOnly).Msg("nbd client attached")
	err = c.transmit()
	switch {
	case err == nil:
		c.log.Info().Msg("nbd client disconnected")
	case c.stopping.Load():
		c.log.Info().Msg("nbd connection closed by server shutdown")
	default:
		c.log.Warn().Err(err).Msg("nbd connection ended")
	}
}

// clientGone reports an error that means the peer left (or a deadline of
// ours fired), which is logged quietly.
func clientGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF)
}
