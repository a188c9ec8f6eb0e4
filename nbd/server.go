package nbd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Export is one named block device the server offers.
type Export struct {
	// Name is what clients ask for (NBD_OPT_GO / NBD_OPT_EXPORT_NAME). The
	// empty name, the protocol's "default export", selects the export named
	// "" if there is one, else the first export.
	Name string
	// Description is sent in NBD_INFO_DESCRIPTION and NBD_OPT_LIST.
	Description string
	Backend     Backend
	// ReadOnly exports a writable Backend read-only, as a Backend whose
	// ReadOnly is true is: NBD_FLAG_READ_ONLY in the transmission flags,
	// no TRIM or WRITE_ZEROES advertised, and every WRITE, TRIM and
	// WRITE_ZEROES (FUA or not) answered EPERM without reaching the
	// Backend. FLUSH is served.
	ReadOnly bool
}

// Options tune a Server. The zero value is usable.
type Options struct {
	// MaxInFlight is the number of requests one connection may have
	// between reading and replying; the server stops reading from the
	// socket when it is reached. Default 128.
	MaxInFlight int
	// MaxInFlightBytes bounds the READ/WRITE payload bytes the whole
	// server holds at once (a WRITE's payload from its header until its
	// reply is sent, a READ's reply buffer likewise). A connection whose
	// next request would exceed it stops reading until enough is released.
	// Default 64 MiB; at least 32 MiB (one maximum request).
	MaxInFlightBytes int64
	// MaxConns bounds the connections Serve has open at once, over all
	// listeners; Serve closes any connection beyond it at once, before the
	// greeting. Connections from ServeTransmission do not count. Default 64.
	MaxConns int
	// HandshakeTimeout bounds option haggling. Default 30s.
	HandshakeTimeout time.Duration
	// IOTimeout bounds how long a client may stall in the transmission
	// phase: once a WRITE header has arrived, the payload must keep
	// arriving with no pause of IOTimeout or more, and the client must keep
	// taking replies (at least 128 KiB per IOTimeout). A slow client that
	// keeps making progress is served however long a transfer takes; a
	// connection that stalls is closed. Idle connections (between
	// requests) have no deadline. Default 30s.
	IOTimeout time.Duration
	// Logger receives connection events and backend errors. The zero
	// Logger discards everything.
	Logger zerolog.Logger
}

const (
	defaultMaxInFlight      = 128
	defaultMaxInFlightBytes = 64 << 20
	defaultMaxConns         = 64
	defaultHandshakeTimeout = 30 * time.Second
	defaultIOTimeout        = 30 * time.Second
	// closeWriteGrace is how long Close lets the reply writer try to
	// deliver the replies of cancelled requests before it gives up on a
	// client that does not read.
	closeWriteGrace = time.Second
)

// ErrServerClosed is returned by Serve after Close or Shutdown.
var ErrServerClosed = errors.New("nbd: server closed")

// Server serves exports over NBD. All methods are safe for concurrent use.
// Serve may be called on several listeners at once. Close and Shutdown are
// idempotent; after either, Serve returns ErrServerClosed.
type Server struct {
	exports []Export
	opts    Options
	log     zerolog.Logger

	base   context.Context // parent of every connection; cancelled by Close
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	accepted  int            // live connections from Serve, against MaxConns
	wg        sync.WaitGroup // one per live connection goroutine

	bytes *byteBudget // payload bytes in flight, over all connections
}

// NewServer checks the exports and returns a server for them. Export names
// must be unique and at most 4096 bytes, and every Backend must have a valid
// geometry (see Backend: power-of-two block size up to 64 KiB dividing the
// size).
func NewServer(exports []Export, opts Options) (*Server, error) {
	if len(exports) == 0 {
		return nil, errors.New("new nbd server: no exports")
	}
	seen := make(map[string]bool, len(exports))
	for _, e := range exports {
		if e.Backend == nil {
			return nil, fmt.Errorf("new nbd server: export %q has no backend", e.Name)
		}
		if len(e.Name) > 4096 || len(e.Description) > 4096 {
			return nil, fmt.Errorf("new nbd server: export %q: name or description longer than 4096 bytes", e.Name)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("new nbd server: duplicate export name %q", e.Name)
		}
		seen[e.Name] = true
		if _, err := geometryOf(e.Backend); err != nil {
			return nil, fmt.Errorf("new nbd server: export %q: %w", e.Name, err)
		}
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = defaultMaxInFlight
	}
	if opts.MaxInFlightBytes <= 0 {
		opts.MaxInFlightBytes = defaultMaxInFlightBytes
	}
	opts.MaxInFlightBytes = max(opts.MaxInFlightBytes, maxPayload)
	if opts.MaxConns <= 0 {
		opts.MaxConns = defaultMaxConns
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = defaultHandshakeTimeout
	}
	if opts.IOTimeout <= 0 {
		opts.IOTimeout = defaultIOTimeout
	}
	s := &Server{
		exports:   append([]Export(nil), exports...),
		opts:      opts,
		log:       opts.Logger,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		bytes:     newByteBudget(opts.MaxInFlightBytes),
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// lookup resolves a client's export name.
func (s *Server) lookup(name string) (*Export, bool) {
	for i := range s.exports {
		if s.exports[i].Name == name {
			return &s.exports[i], true
		}
	}
	if name == "" {
		return &s.exports[0], true
	}
	return nil, false
}

// Serve accepts connections on l and serves each in its own goroutine until
// ctx is done or the server is closed. It closes l before returning, and
// returns only after every connection it accepted has ended.
//
// Cancelling ctx stops this listener gracefully, like Shutdown does for the
// whole server: l is closed, its connections stop reading requests, and the
// requests already read are answered before each connection closes. Backend
// calls are not cancelled; a caller that cannot wait for them calls Close
// (or Shutdown with a deadline). The result is ctx.Err() after
// cancellation, ErrServerClosed after Close/Shutdown, or the accept error
// (after which Serve ends its connections as Close would).
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()

	serveCtx, cancel := context.WithCancel(s.base)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()

	// Connections accepted by this Serve. After Close or Shutdown they are
	// being ended by that call; after a fatal accept error Serve ends them
	// itself (cancel) before waiting.
	var conns sync.WaitGroup
	defer conns.Wait()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()

	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Resource exhaustion (EMFILE and the like): back off.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn().Err(err).Dur("retry_in", delay).Msg("nbd accept")
				select {
				case <-time.After(delay):
				case <-serveCtx.Done():
				}
				continue
			}
			cancel()
			return fmt.Errorf("nbd accept on %s: %w", l.Addr(), err)
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		if s.accepted >= s.opts.MaxConns {
			s.mu.Unlock()
			// NBD has no way to refuse before the greeting: close.
			s.log.Warn().Str("remote", nc.RemoteAddr().String()).Int("max_conns", s.opts.MaxConns).
				Msg("nbd connection refused: connection limit reached")
			nc.Close()
			continue
		}
		c := newConn(s, serveCtx, nc)
		s.conns[c] = struct{}{}
		s.accepted++
		s.wg.Add(1)
		conns.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer conns.Done()
			defer context.AfterFunc(ctx, c.stopReading)()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.accepted--
			s.mu.Unlock()
		}()
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// markClosed stops new Serve calls and connections and closes the
// listeners; it returns the live connections.
func (s *Server) markClosed() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// Close stops the server at once: it closes the listeners, cancels the
// context of every in-flight backend call, stops reading requests, gives
// the replies (ESHUTDOWN for cancelled calls) up to a second to reach the
// client, closes the connections, and waits for all connection goroutines.
// It is idempotent and always returns nil; later calls wait like the first.
func (s *Server) Close() error {
	s.markClosed()
	s.cancel() // each connection's AfterFunc calls its hardStop
	s.wg.Wait()
	return nil
}

// Shutdown stops the server gracefully: it closes the listeners, stops
// reading new requests, and waits until every request already read has been
// answered and every connection is closed. Requests the client pipelined but
// the server had not read yet are dropped with the connection. If ctx ends
// first, Shutdown falls back to Close and returns ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	for _, c := range s.markClosed() {
		c.stopReading()
	}
	done := make(chan struct{})
	go func() { // owned by Shutdown: ends when wg drains, which Close forces
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}
