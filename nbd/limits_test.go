package nbd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
	"github.com/rs/zerolog"
)

// Tests of the limits that keep a hostile or broken client from pinning
// the server's memory or connections (doc.go "Limits").

// logBuf is a zerolog destination the test can read while the server logs.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startLogged is startServer with the server's log kept in a logBuf.
func startLogged(t *testing.T, exports []Export, opts Options) (*Server, string, *logBuf) {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbdt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	logs := &logBuf{}
	opts.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
	s, err := NewServer(exports, opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	sock := filepath.Join(dir, "nbd.sock")
	l, err := Listen("unix:" + sock)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return s, sock, logs
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (s *Server) acceptedConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// TestMaxConns: the connection beyond MaxConns is closed before the
// greeting, with one warning; once a connection ends, a new one is served.
func TestMaxConns(t *testing.T) {
	e, _ := memExport("a", nbdtest.Config{Size: testSize})
	s, sock, logs := startLogged(t, []Export{e}, Options{MaxConns: 2})
	c1, c2 := dialRaw(t, sock), dialRaw(t, sock)
	c1.goExport("a")
	c2.goExport("a")

	c3 := dialRaw(t, sock)
	c3.expectClosed()
	if n := strings.Count(logs.String(), "connection limit reached"); n != 1 {
		t.Fatalf("%d warnings about the connection limit, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"level":"warn"`) {
		t.Fatalf("the refusal is not a warning:\n%s", logs.String())
	}

	// The two served connections still work.
	if errno, _ := c2.do(request{Type: cmdFlush, Handle: 7}, nil); errno != 0 {
		t.Fatalf("flush on a served connection: errno %d", errno)
	}
	c1.send(request{Type: cmdDisc}, nil)
	c1.expectClosed()
	waitFor(t, "the server to count the disconnect", func() bool { return s.acceptedConns() == 1 })
	c4 := dialRaw(t, sock)
	c4.goExport("a")
	if errno, _ := c4.do(request{Type: cmdFlush, Handle: 8}, nil); errno != 0 {
		t.Fatalf("flush on a new connection after one left: errno %d", errno)
	}
}

// TestInFlightBytesServerWide: clients that send maximum-size WRITE
// headers and hold back the payload make the server reserve (and so
// allocate) at most MaxInFlightBytes over all connections; the other
// readers wait, and go on once bytes are released.
func TestInFlightBytesServerWide(t *testing.T) {
	const limit = maxPayload // the smallest allowed: one maximum request
	e, mem := memExport("a", nbdtest.Config{Size: 2 * maxPayload})
	s, sock, _ := startLogged(t, []Export{e}, Options{MaxInFlightBytes: limit, IOTimeout: time.Minute})
	var cs []*rawClient
	for i := range 3 {
		c := dialRaw(t, sock)
		c.goExport("a")
		c.send(request{Type: cmdWrite, Handle: uint64(i), Length: maxPayload}, nil)
		cs = append(cs, c)
	}
	// One reader holds the whole budget waiting for its payload; the two
	// others wait for bytes instead of allocating theirs.
	waitFor(t, "one reader to hold the budget and two to wait", func() bool {
		st := s.bytes.stats()
		return st.held+int64(st.waiting)*maxPayload >= 3*maxPayload || st.peak > limit
	})
	if st := s.bytes.stats(); st.peak > limit || st.held != limit || st.waiting != 2 {
		t.Fatalf("in flight: held %d, peak %d, %d readers waiting; want held %d, peak at most %d, 2 waiting",
			st.held, st.peak, st.waiting, limit, limit)
	}

	// All three writes complete once their payloads come: the waiting
	// readers go on as bytes are released.
	payload := bytes.Repeat([]byte{0xa5}, maxPayload)
	errc := make(chan error, len(cs))
	for _, c := range cs {
		go func() { _, err := c.nc.Write(payload); errc <- err }()
	}
	for _, c := range cs {
		if h, errno, _ := c.readReply(nil); errno != 0 {
			t.Fatalf("write %d: errno %d", h, errno)
		}
	}
	for range cs {
		if err := <-errc; err != nil {
			t.Fatalf("send payload: %v", err)
		}
	}
	if got := mem.Stats().BytesWritten; got != 3*maxPayload {
		t.Fatalf("backend wrote %d bytes, want %d", got, 3*maxPayload)
	}
	waitFor(t, "the budget to drain", func() bool { return s.bytes.stats().held == 0 })
	if st := s.bytes.stats(); st.peak > limit {
		t.Fatalf("peak in flight %d, limit %d", st.peak, limit)
	}
}

// TestPayloadDeadline: a client that stalls in the middle of a WRITE
// payload is disconnected after IOTimeout and its bytes are released; an
// idle client, between requests, is not.
func TestPayloadDeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	e, _ := memExport("a", nbdtest.Config{Size: testSize})
	s, sock, logs := startLogged(t, []Export{e}, Options{IOTimeout: timeout})
	c := dialRaw(t, sock)
	c.goExport("a")
	blk := make([]byte, 4096)
	if errno, _ := c.do(request{Type: cmdWrite, Handle: 1, Length: 4096}, blk); errno != 0 {
		t.Fatalf("write: errno %d", errno)
	}
	time.Sleep(3 * timeout) // idle: no deadline between requests
	if errno, _ := c.do(request{Type: cmdWrite, Handle: 2, Length: 4096}, blk); errno != 0 {
		t.Fatalf("write after an idle spell: errno %d", errno)
	}

	c.send(request{Type: cmdWrite, Handle: 3, Length: 65536}, blk) // 4 KiB of 64 KiB, then nothing
	start := time.Now()
	c.expectClosed()
	t.Logf("stalled client dropped after %v", time.Since(start))
	waitFor(t, "the stalled request's bytes to be released", func() bool { return s.bytes.stats().held == 0 })
	if !strings.Contains(logs.String(), "nothing received for") {
		t.Fatalf("no log line names the payload deadline:\n%s", logs.String())
	}

	// A rejected WRITE's payload (drained, not buffered) has the same
	// deadline.
	c = dialRaw(t, sock)
	c.goExport("a")
	c.send(request{Type: cmdWrite, Handle: 4, Length: 1 << 30}, blk)
	c.expectClosed()
}

// TestReplyDeadline: a client that sends READs and never reads the
// replies is disconnected after IOTimeout, and the reply buffers go back
// to the server-wide budget.
func TestReplyDeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	e, _ := memExport("a", nbdtest.Config{Size: 8 << 20})
	s, sock, _ := startLogged(t, []Export{e}, Options{IOTimeout: timeout})
	c := dialRaw(t, sock)
	c.goExport("a")
	// Far more than a socket buffer holds, so the writer blocks.
	c.send(request{Type: cmdRead, Handle: 1, Length: 8 << 20}, nil)
	waitFor(t, "the reply to be in flight", func() bool { return s.bytes.stats().peak == 8<<20 })
	waitFor(t, "the connection to be dropped", func() bool { return s.acceptedConns() == 0 })
	if held := s.bytes.stats().held; held != 0 {
		t.Fatalf("%d bytes still held after the connection ended", held)
	}
}

// TestHandshakeDeadline: a client that connects and says nothing is
// dropped after HandshakeTimeout.
func TestHandshakeDeadline(t *testing.T) {
	e, _ := memExport("a", nbdtest.Config{Size: testSize})
	s, sock, _ := startLogged(t, []Export{e}, Options{HandshakeTimeout: 200 * time.Millisecond})
	c := dialRaw(t, sock)
	var greeting [18]byte
	c.read(greeting[:])
	c.expectClosed()
	waitFor(t, "the server to forget the connection", func() bool { return s.acceptedConns() == 0 })
}

// TestByteBudgetOrder: waiting readers are served first come first served
// (a small request that would fit does not overtake a large one), and a
// reader that stops waiting leaves the queue and lets the next one in.
func TestByteBudgetOrder(t *testing.T) {
	b := newByteBudget(100)
	never := make(chan struct{})
	if !b.acquire(60, never) {
		t.Fatal("first acquire failed")
	}
	wait := func(n int64, stop chan struct{}) chan bool {
		got := make(chan bool, 1)
		go func() { got <- b.acquire(n, stop) }()
		return got
	}
	queued := func(n int) {
		t.Helper()
		waitFor(t, "readers to queue", func() bool { return b.stats().waiting == n })
	}
	big := wait(60, never)
	queued(1)
	small := wait(10, never) // fits beside the 60 held, but big came first
	queued(2)
	if len(small) != 0 {
		t.Fatal("a later, smaller request overtook a waiting one")
	}
	b.release(60)
	if !<-big || !<-small {
		t.Fatal("waiters not granted after release")
	}
	if st := b.stats(); st.held != 70 || st.waiting != 0 || st.peak != 70 {
		t.Fatalf("after grants: %+v", st)
	}

	// The head of the queue gives up: the one behind it gets its bytes.
	stop := make(chan struct{})
	head := wait(40, stop)
	queued(1)
	next := wait(30, never)
	queued(2)
	close(stop)
	if <-head {
		t.Fatal("a stopped waiter acquired")
	}
	if !<-next {
		t.Fatal("the waiter behind a stopped one was not granted")
	}
	if st := b.stats(); st.held != 100 || st.waiting != 0 {
		t.Fatalf("after a waiter left: %+v", st)
	}
}
