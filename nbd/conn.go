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

	"github.com/iser-attach/iser-attach/blockdev"
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
	sc  stallConn // nc as br and bw see it: re-arms IOTimeout on progress
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
	workers sync.WaitGroup // requests being executed
	async   blockdev.Async // the export's, or nil: blocking calls on workers
	// Asynchronous requests in flight (transmission.go): asyncMu guards
	// asyncs and abandoned, and orders IODone's reply against waitAsync.
	asyncMu   sync.Mutex
	asyncs    map[*asyncReq]struct{}
	abandoned bool // waitAsync answered the rest: late IODones only release
	asyncWG   sync.WaitGroup
	jobs      chan job // to idle workers
	rs        *reaper  // the writer reaps the backend's completions, or nil
	// The reader's batch (batch.go): requests started from what one
	// socket read brought are posted together.
	batcher blockdev.Batcher
	batch   blockdev.Batch
	batched bool // a batch is open
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
		stopCh: make(chan struct{}),
	}
	c.sc.c = c
	c.br = bufio.NewReaderSize(&c.sc, 64<<10)
	c.bw = bufio.NewWriterSize(&c.sc, 64<<10)
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

// armWrite gives the next piece of reply data IOTimeout to reach the
// socket, unless hardStop already set its shorter grace, which then bounds
// all that is left to write.
func (c *conn) armWrite() {
	c.wdMu.Lock()
	defer c.wdMu.Unlock()
	if !c.hard {
		c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.IOTimeout))
	}
}

// writeChunk is the most reply data written under one write deadline. A
// client must take this much within IOTimeout to count as making progress
// (about 4.4 KB/s with the default 30 s): small enough that only a stalled
// client is dropped, large enough that the extra write calls cost nothing
// next to the copying.
const writeChunk = 128 << 10

// stallConn is the socket as the connection's bufio reader and writer see
// it. In the transmission phase it makes Options.IOTimeout bound a stall
// rather than a whole transfer: every socket read of a WRITE payload, and
// every write of at most writeChunk reply bytes, gets a fresh deadline. A
// slow client that keeps making progress is served however long a 32 MiB
// payload or reply takes; one that stops for IOTimeout is dropped. It is
// part of conn, so it costs no allocation per request.
type stallConn struct {
	c *conn
	// inPayload is set while readPayload reads a payload, armed once a read
	// has set a read deadline that readPayload must clear. Both belong to
	// the reader goroutine, the only one that reads.
	inPayload, armed bool
	// paced is set by the writer goroutine when it starts; from then on it
	// is the only one that writes. Handshake writes, before, keep the
	// handshake deadline.
	paced bool
}

// Read reads from the socket; in a payload it first gives the read
// IOTimeout.
func (s *stallConn) Read(p []byte) (int, error) {
	c := s.c
	if s.inPayload {
		c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.IOTimeout))
		s.armed = true
		// The flag is checked after the deadline is set, so a concurrent
		// stopReading (flag, then past deadline) is never overridden
		// unseen by this re-arm.
		if c.stopping.Load() {
			return 0, errStopped
		}
	}
	return c.nc.Read(p)
}

// Write writes p to the socket; once the writer runs, in pieces of at most
// writeChunk, each with its own write deadline.
func (s *stallConn) Write(p []byte) (int, error) {
	c := s.c
	if !s.paced {
		return c.nc.Write(p)
	}
	n := 0
	for len(p) > 0 {
		k := min(len(p), writeChunk)
		c.armWrite()
		if c.rs != nil {
			// A writer that reaps must not wait for the client while it
			// holds the backend's completions (reaper).
			if m := c.rs.writeNow(p[:k]); m > 0 {
				n += m
				p = p[m:]
				continue
			}
		}
		m, err := c.nc.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
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
	c.async, _ = blockdev.As[blockdev.Async](exp.Backend)
	if c.async != nil {
		c.batcher, _ = blockdev.As[blockdev.Batcher](exp.Backend)
	}
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
