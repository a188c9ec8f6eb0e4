package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

const testSize = 1 << 20

// TestRequestChecks sends every kind of bad request over one connection and
// checks the error reply, that nothing bad reached the backend, and that the
// connection stays usable.
func TestRequestChecks(t *testing.T) {
	rw, mem := memExport("rw", nbdtest.Config{Size: testSize, BlockSize: 4096})
	ro, roMem := memExport("ro", nbdtest.Config{Size: testSize, ReadOnly: true})
	nz, nzMem := memExport("nz", nbdtest.Config{Size: testSize, NoTrim: true, NoWriteZeroes: true})
	// A writable backend exported read-only (Export.ReadOnly).
	rox, roxMem := memExport("rox", nbdtest.Config{Size: testSize})
	rox.ReadOnly = true
	ts := startServer(t, []Export{rw, ro, nz, rox}, Options{})

	blk := bytes.Repeat([]byte{0xa5}, 4096)
	tests := []struct {
		export  string
		name    string
		req     request
		payload []byte
		want    uint32
	}{
		{"rw", "read ok", request{Type: cmdRead, Length: 4096}, nil, 0},
		{"rw", "read last block", request{Type: cmdRead, Offset: testSize - 4096, Length: 4096}, nil, 0},
		{"rw", "read past end", request{Type: cmdRead, Offset: testSize - 4096, Length: 8192}, nil, errInval},
		{"rw", "read at end", request{Type: cmdRead, Offset: testSize, Length: 4096}, nil, errInval},
		{"rw", "read offset overflow", request{Type: cmdRead, Offset: math.MaxUint64 - 4095, Length: 8192}, nil, errInval},
		{"rw", "read misaligned offset", request{Type: cmdRead, Offset: 512, Length: 4096}, nil, errInval},
		{"rw", "read misaligned length", request{Type: cmdRead, Length: 512}, nil, errInval},
		{"rw", "read zero length", request{Type: cmdRead}, nil, errInval},
		{"rw", "read over 32MiB", request{Type: cmdRead, Length: 32<<20 + 4096}, nil, errInval},
		{"rw", "read with NO_HOLE flag", request{Type: cmdRead, Flags: cmdFlagNoHole, Length: 4096}, nil, errInval},
		{"rw", "read with FUA is accepted", request{Type: cmdRead, Flags: cmdFlagFUA, Length: 4096}, nil, 0},
		{"rw", "write ok", request{Type: cmdWrite, Offset: 4096, Length: 4096}, blk, 0},
		{"rw", "write past end", request{Type: cmdWrite, Offset: testSize, Length: 4096}, blk, errNoSpc},
		{"rw", "write offset overflow", request{Type: cmdWrite, Offset: math.MaxUint64 - 4095, Length: 4096}, blk, errNoSpc},
		{"rw", "write misaligned", request{Type: cmdWrite, Offset: 100, Length: 4096}, blk, errInval},
		{"rw", "write over 32MiB payload is drained", request{Type: cmdWrite, Length: 32<<20 + 4096}, make([]byte, 32<<20+4096), errInval},
		{"rw", "write with DF flag", request{Type: cmdWrite, Flags: cmdFlagDF, Length: 4096}, blk, errInval},
		{"rw", "flush ok", request{Type: cmdFlush}, nil, 0},
		{"rw", "flush with range", request{Type: cmdFlush, Length: 4096}, nil, errInval},
		{"rw", "trim ok", request{Type: cmdTrim, Offset: 8192, Length: 8192}, nil, 0},
		{"rw", "trim past end", request{Type: cmdTrim, Offset: testSize - 4096, Length: 8192}, nil, errInval},
		{"rw", "trim big range", request{Type: cmdTrim, Offset: 65536, Length: testSize - 65536}, nil, 0},
		{"rw", "write zeroes ok", request{Type: cmdWriteZeroes, Flags: cmdFlagNoHole | cmdFlagFUA, Length: 4096}, nil, 0},
		{"rw", "write zeroes past end", request{Type: cmdWriteZeroes, Offset: testSize, Length: 4096}, nil, errNoSpc},
		{"rw", "write zeroes fast-zero not negotiated", request{Type: cmdWriteZeroes, Flags: cmdFlagFastZero, Length: 4096}, nil, errInval},
		{"rw", "cache not negotiated", request{Type: cmdCache, Length: 4096}, nil, errInval},
		{"rw", "block status not negotiated", request{Type: cmdBlockStatus, Length: 4096}, nil, errInval},
		{"rw", "unknown command", request{Type: 77, Length: 4096}, nil, errInval},
		{"ro", "read-only read ok", request{Type: cmdRead, Length: 512}, nil, 0},
		{"ro", "read-only write", request{Type: cmdWrite, Length: 512}, blk[:512], errPerm},
		{"ro", "read-only trim", request{Type: cmdTrim, Length: 512}, nil, errPerm},
		{"ro", "read-only write zeroes", request{Type: cmdWriteZeroes, Length: 512}, nil, errPerm},
		{"ro", "read-only flush ok", request{Type: cmdFlush}, nil, 0},
		{"rox", "exported read-only: read ok", request{Type: cmdRead, Length: 512}, nil, 0},
		{"rox", "exported read-only: write", request{Type: cmdWrite, Length: 512}, blk[:512], errPerm},
		{"rox", "exported read-only: FUA write", request{Type: cmdWrite, Flags: cmdFlagFUA, Length: 512}, blk[:512], errPerm},
		{"rox", "exported read-only: trim", request{Type: cmdTrim, Length: 512}, nil, errPerm},
		{"rox", "exported read-only: write zeroes", request{Type: cmdWriteZeroes, Length: 512}, nil, errPerm},
		{"rox", "exported read-only: flush ok", request{Type: cmdFlush}, nil, 0},
		{"nz", "trim unsupported", request{Type: cmdTrim, Length: 512}, nil, errInval},
		{"nz", "write zeroes unsupported", request{Type: cmdWriteZeroes, Length: 512}, nil, errInval},
	}
	clients := map[string]*rawClient{}
	for _, name := range []string{"rw", "ro", "nz", "rox"} {
		clients[name] = dialRaw(t, ts.sock)
		clients[name].goExport(name)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clients[tt.export]
			c.t = t
			tt.req.Handle = uint64(i) + 1000
			errno, data := c.do(tt.req, tt.payload)
			if errno != tt.want {
				t.Fatalf("errno %d, want %d", errno, tt.want)
			}
			if tt.req.Type == cmdRead && errno == 0 && len(data) != int(tt.req.Length) {
				t.Fatalf("read %d bytes, want %d", len(data), tt.req.Length)
			}
		})
	}
	for name, c := range clients {
		c.t = t
		// Each connection is still in step after all its errors.
		if errno, _ := c.do(request{Type: cmdRead, Handle: 1, Length: 4096}, nil); errno != 0 {
			t.Errorf("%s: read after errors: errno %d", name, errno)
		}
	}
	if got := mem.Bytes()[4096:8192]; !bytes.Equal(got, blk) {
		t.Errorf("write did not reach the backend")
	}
	for name, m := range map[string]*nbdtest.Memory{"rw": mem, "ro": roMem, "nz": nzMem, "rox": roxMem} {
		if st := m.Stats(); st.Violations != 0 {
			t.Errorf("%s: backend saw %d bad calls, last: %s", name, st.Violations, st.LastViolation)
		}
	}
	st := mem.Stats()
	if st.Flushes != 1 || st.Trims != 2 || st.WriteZeroes != 1 || st.WriteZeroesNoUnmap != 1 || st.FUAWriteZeroes != 1 {
		t.Errorf("backend stats %+v", st)
	}
	if st := roMem.Stats(); st.Writes+st.Trims+st.WriteZeroes != 0 {
		t.Errorf("read-only backend was written: %+v", st)
	}
	if st := roxMem.Stats(); st.Writes+st.Trims+st.WriteZeroes != 0 || st.Flushes != 1 {
		t.Errorf("backend exported read-only: %+v", st)
	}
	if info, err := ts.ExportInfo("rox"); err != nil ||
		info.TransmissionFlags != flagHasFlags|flagSendFlush|flagSendFUA|flagCanMultiConn|flagReadOnly {
		t.Errorf("export info of the read-only export: %+v %v", info, err)
	}
}

type errnoErr struct{ en syscall.Errno }

func (e errnoErr) Error() string        { return "custom " + e.en.Error() }
func (e errnoErr) Errno() syscall.Errno { return e.en }

// TestBackendErrors injects backend failures and checks the NBD error each
// becomes, for every command type.
func TestBackendErrors(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		e, mem := memExport("e", nbdtest.Config{Size: testSize})
		ts := startServer(t, []Export{e}, Options{})
		c := dialRaw(t, ts.sock)
		c.goExport("e")
		tests := []struct {
			err  error
			want uint32
		}{
			{syscall.EIO, errIO},
			{fmt.Errorf("wrapped: %w", syscall.ENOSPC), errNoSpc},
			{syscall.EDQUOT, errNoSpc},
			{syscall.EROFS, errPerm},
			{errnoErr{syscall.EINVAL}, errInval},
			{fmt.Errorf("sense: %w", errnoErr{syscall.ENOMEM}), errNoMem},
			{errnoErr{syscall.ENOTSUP}, errNotSup},
			{syscall.ENOENT, errIO},
			{errors.New("target went away"), errIO},
			{context.Canceled, errIO}, // not shutting down: a plain failure
		}
		cmds := []request{
			{Type: cmdRead, Length: 512},
			{Type: cmdWrite, Length: 512},
			{Type: cmdFlush},
			{Type: cmdTrim, Length: 512},
			{Type: cmdWriteZeroes, Length: 512},
		}
		for _, tt := range tests {
			mem.SetHook(func(context.Context, nbdtest.Op, int64, int64) error { return tt.err })
			for i, req := range cmds {
				req.Handle = uint64(i)
				var payload []byte
				if req.Type == cmdWrite {
					payload = make([]byte, 512)
				}
				if errno, _ := c.do(req, payload); errno != tt.want {
					t.Errorf("%v on cmd %d: errno %d, want %d", tt.err, req.Type, errno, tt.want)
				}
			}
		}
		mem.SetHook(nil)
		if errno, _ := c.do(request{Type: cmdRead, Length: 512}, nil); errno != 0 {
			t.Fatalf("read after errors: errno %d", errno)
		}
	})
}

// TestSplitAndFUA checks that READ/WRITE larger than MaxTransfer are split
// into MaxTransfer-sized backend calls, that FUA reaches each of them, and
// that the data round-trips.
func TestSplitAndFUA(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		e, mem := memExport("s", nbdtest.Config{Size: 4 << 20, BlockSize: 512, MaxTransfer: 65536 + 512})
		ts := startServer(t, []Export{e}, Options{})
		c := dialRaw(t, ts.sock)
		c.goExport("s")
		data := make([]byte, 1<<20+512)
		for i := range data {
			data[i] = byte(rand.Uint32())
		}
		if errno, _ := c.do(request{Type: cmdWrite, Flags: cmdFlagFUA, Offset: 512, Length: uint32(len(data))}, data); errno != 0 {
			t.Fatalf("write errno %d", errno)
		}
		errno, got := c.do(request{Type: cmdRead, Offset: 512, Length: uint32(len(data))}, nil)
		if errno != 0 || !bytes.Equal(got, data) {
			t.Fatalf("read back: errno %d, equal %v", errno, bytes.Equal(got, data))
		}
		st := mem.Stats()
		// 1 MiB + 512 in pieces of 66048 bytes: 15 full pieces and a remainder.
		if st.Writes != 16 || st.FUAWrites != 16 || st.Reads != 16 {
			t.Errorf("writes %d (FUA %d), reads %d; want 16 each", st.Writes, st.FUAWrites, st.Reads)
		}
		if st.MaxWriteLen != 65536+512 || st.MaxReadLen != 65536+512 || st.Violations != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestPipelining sends many reads at once to a backend that holds every
// call until all of them are running, then releases them in reverse order:
// the server must have them all in flight and reply out of order.
func TestPipelining(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		const n = 32
		e, mem := memExport("p", nbdtest.Config{Size: testSize})
		ts := startServer(t, []Export{e}, Options{MaxInFlight: n})
		c := dialRaw(t, ts.sock)
		c.goExport("p")

		arrived := make(chan int64, n)
		release := make([]chan struct{}, n)
		for i := range release {
			release[i] = make(chan struct{})
		}
		mem.SetHook(func(ctx context.Context, _ nbdtest.Op, off, _ int64) error {
			arrived <- off
			select {
			case <-release[off/512]:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		lens := map[uint64]int{}
		for i := range n {
			mem.Poke(int64(i)*512, bytes.Repeat([]byte{byte(i)}, 512))
			c.send(request{Type: cmdRead, Handle: uint64(i), Offset: uint64(i) * 512, Length: 512}, nil)
			lens[uint64(i)] = 512
		}
		timeout := time.After(10 * time.Second)
		for range n {
			select {
			case <-arrived:
			case <-timeout:
				t.Fatalf("only %d of %d requests reached the backend concurrently", mem.Stats().MaxInFlight, n)
			}
		}
		for i := n - 1; i >= 0; i-- {
			close(release[i])
			h, errno, data := c.readReply(lens)
			if h != uint64(i) || errno != 0 || data[0] != byte(i) || data[511] != byte(i) {
				t.Fatalf("reply %d: handle %d errno %d data[0] %d", n-1-i, h, errno, data[0])
			}
		}
		if got := mem.Stats().MaxInFlight; got != n {
			t.Errorf("max in flight %d, want %d", got, n)
		}
	})
}

// TestMaxInFlight checks that the server stops reading once MaxInFlight
// requests are outstanding.
func TestMaxInFlight(t *testing.T) {
	const limit = 4
	e, mem := memExport("m", nbdtest.Config{Size: testSize})
	ts := startServer(t, []Export{e}, Options{MaxInFlight: limit})
	c := dialRaw(t, ts.sock)
	c.goExport("m")
	gate := make(chan struct{})
	mem.SetHook(func(ctx context.Context, _ nbdtest.Op, _, _ int64) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	lens := map[uint64]int{}
	for i := range 3 * limit {
		c.send(request{Type: cmdRead, Handle: uint64(i), Length: 512}, nil)
		lens[uint64(i)] = 512
	}
	deadline := time.Now().Add(5 * time.Second)
	for mem.Stats().MaxInFlight < limit && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // give a broken limit time to show
	if got := mem.Stats().MaxInFlight; got != limit {
		t.Fatalf("backend saw %d calls at once, want exactly %d", got, limit)
	}
	close(gate)
	for range 3 * limit {
		if _, errno, _ := c.readReply(lens); errno != 0 {
			t.Fatalf("errno %d", errno)
		}
	}
}

// TestDisconnectWaitsForInFlight: NBD_CMD_DISC after pipelined writes; the
// server must finish and answer them before closing.
func TestDisconnectWaitsForInFlight(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		e, mem := memExport("d", nbdtest.Config{Size: testSize})
		ts := startServer(t, []Export{e}, Options{})
		c := dialRaw(t, ts.sock)
		c.goExport("d")
		mem.SetHook(func(ctx context.Context, op nbdtest.Op, _, _ int64) error {
			time.Sleep(20 * time.Millisecond)
			return nil
		})
		for i := range 8 {
			c.send(request{Type: cmdWrite, Handle: uint64(i), Offset: uint64(i) * 512, Length: 512}, bytes.Repeat([]byte{1}, 512))
		}
		c.send(request{Type: cmdDisc}, nil)
		for range 8 {
			if _, errno, _ := c.readReply(nil); errno != 0 {
				t.Fatalf("errno %d", errno)
			}
		}
		c.expectClosed()
		if st := mem.Stats(); st.Writes != 8 {
			t.Fatalf("%d writes reached the backend, want 8", st.Writes)
		}
	})
}

// blockForever returns a hook that blocks until the call's context ends,
// and a channel that receives once per blocked call.
func blockForever() (nbdtest.Hook, chan struct{}) {
	started := make(chan struct{}, 100)
	return func(ctx context.Context, _ nbdtest.Op, _, _ int64) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, started
}

// TestCloseUnblocks: Close must return promptly while backend calls hang,
// answering them with ESHUTDOWN, and must be idempotent.
func TestCloseUnblocks(t *testing.T) {
	e, mem := memExport("c", nbdtest.Config{Size: testSize})
	ts := startServer(t, []Export{e}, Options{})
	c := dialRaw(t, ts.sock)
	c.goExport("c")
	idle := dialRaw(t, ts.sock) // a client still in the handshake
	idle.greet(flagCFixedNewstyle)
	hook, started := blockForever()
	mem.SetHook(hook)
	c.send(request{Type: cmdRead, Handle: 1, Length: 512}, nil)
	c.send(request{Type: cmdFlush, Handle: 2}, nil)
	<-started
	<-started

	done := make(chan struct{})
	go func() {
		ts.Close()
		ts.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on blocked backend calls")
	}
	for range 2 {
		if _, errno, _ := c.readReply(nil); errno != errShutdown {
			t.Errorf("reply errno %d, want ESHUTDOWN", errno)
		}
	}
	c.expectClosed()
	idle.expectClosed()
	if l, err := Listen("unix:" + ts.sock); err != nil {
		t.Errorf("socket not reusable after Close: %v", err)
	} else {
		l.Close()
	}
}

// TestCloseAnswersAsyncRequests: a backend cannot take an asynchronous
// request back, yet Close returns promptly: the request is answered
// ESHUTDOWN, and its late end only gives its buffer back.
func TestCloseAnswersAsyncRequests(t *testing.T) {
	asyncBackends = true
	defer func() { asyncBackends = false }()
	e, mem := memExport("a", nbdtest.Config{Size: testSize})
	ts := startServer(t, []Export{e}, Options{})
	c := dialRaw(t, ts.sock)
	c.goExport("a")
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	ended := make(chan struct{}, 4)
	mem.SetHook(func(context.Context, nbdtest.Op, int64, int64) error {
		started <- struct{}{}
		<-release // not the context: an asynchronous request is not cancelled
		ended <- struct{}{}
		return nil
	})
	c.send(request{Type: cmdRead, Handle: 1, Length: 512}, nil)
	c.send(request{Type: cmdWrite, Handle: 2, Length: 512}, make([]byte, 512))
	<-started
	<-started
	done := make(chan struct{})
	go func() {
		ts.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Close waits for asynchronous requests the backend still runs")
	}
	handles := map[uint64]bool{}
	for range 2 {
		h, errno, _ := c.readReply(map[uint64]int{1: 512})
		if errno != errShutdown {
			t.Errorf("reply to %d: errno %d, want ESHUTDOWN", h, errno)
		}
		handles[h] = true
	}
	if !handles[1] || !handles[2] {
		t.Errorf("replies for %v, want 1 and 2", handles)
	}
	c.expectClosed()
	close(release) // the late ends must not send on the closed connection
	for range 2 {
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("backend calls did not end")
		}
	}
	time.Sleep(20 * time.Millisecond) // their IODone runs after the hook returns
}

// TestShutdownGraceful: Shutdown lets in-flight requests finish normally.
func TestShutdownGraceful(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		e, mem := memExport("g", nbdtest.Config{Size: testSize})
		ts := startServer(t, []Export{e}, Options{})
		c := dialRaw(t, ts.sock)
		c.goExport("g")
		gate := make(chan struct{})
		started := make(chan struct{}, 1)
		mem.SetHook(func(ctx context.Context, _ nbdtest.Op, _, _ int64) error {
			started <- struct{}{}
			<-gate
			return nil
		})
		c.send(request{Type: cmdWrite, Handle: 9, Length: 512}, make([]byte, 512))
		<-started
		res := make(chan error, 1)
		go func() { res <- ts.Shutdown(context.Background()) }()
		time.Sleep(50 * time.Millisecond)
		select {
		case err := <-res:
			t.Fatalf("Shutdown returned %v with a request in flight", err)
		default:
		}
		close(gate)
		if h, errno, _ := c.readReply(nil); h != 9 || errno != 0 {
			t.Fatalf("in-flight write: handle %d errno %d", h, errno)
		}
		if err := <-res; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		c.expectClosed()
	})
}

// TestShutdownTimeout: when ctx expires Shutdown falls back to Close.
func TestShutdownTimeout(t *testing.T) {
	e, mem := memExport("g", nbdtest.Config{Size: testSize})
	ts := startServer(t, []Export{e}, Options{})
	c := dialRaw(t, ts.sock)
	c.goExport("g")
	hook, started := blockForever()
	mem.SetHook(hook)
	c.send(request{Type: cmdRead, Handle: 3, Length: 512}, nil)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want deadline exceeded", err)
	}
	if _, errno, _ := c.readReply(nil); errno != errShutdown {
		t.Fatalf("errno %d, want ESHUTDOWN", errno)
	}
}

// TestServeContext: cancelling Serve's ctx stops its listener and its
// connections gracefully: the request in flight is answered, and Serve
// returns once the connection is closed.
func TestServeContext(t *testing.T) {
	e, mem := memExport("x", nbdtest.Config{Size: testSize})
	s, err := NewServer([]Export{e}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, l) }()

	c := dialRawNet(t, "tcp", l.Addr().String())
	c.goExport("x")
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	mem.SetHook(func(ctx context.Context, _ nbdtest.Op, _, _ int64) error {
		started <- struct{}{}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	c.send(request{Type: cmdRead, Handle: 1, Length: 512}, nil)
	<-started
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("listener still accepting after ctx cancel")
	}
	close(gate)
	if _, errno, data := c.readReply(map[uint64]int{1: 512}); errno != 0 || len(data) != 512 {
		t.Fatalf("in-flight read: errno %d, %d bytes", errno, len(data))
	}
	select {
	case err := <-served:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after ctx cancel")
	}
	c.expectClosed()
	if st := mem.Stats(); st.Reads != 1 {
		t.Errorf("%d reads reached the backend, want 1", st.Reads)
	}
}

// TestCloseAnswersAsyncRequestEndingMeanwhile: a request whose backend
// call ends while Close answers the rest gets exactly one reply. Its
// IODone is held after the call ended, before its reply reaches the
// writer, until the connection has ended: it must have been answered
// ESHUTDOWN then (its late IODone only gives the buffer back), not
// dropped by both sides.
func TestCloseAnswersAsyncRequestEndingMeanwhile(t *testing.T) {
	asyncBackends = true
	defer func() { asyncBackends = false }()
	e, mem := memExport("a", nbdtest.Config{Size: testSize})
	ts := startServer(t, []Export{e}, Options{})
	c := dialRaw(t, ts.sock)
	c.goExport("a")
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	gap := func() {
		once.Do(func() {
			close(held)
			<-release
		})
	}
	testIODoneGap.Store(&gap)
	defer testIODoneGap.Store(nil)
	c.send(request{Type: cmdRead, Handle: 7, Length: 512}, nil)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not end")
	}
	closed := make(chan struct{})
	go func() {
		ts.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Close waits for an IODone")
	}
	close(release)
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, errno, _ := c.readReply(nil)
	if h != 7 || errno != errShutdown {
		t.Fatalf("reply to %d errno %d, want 7 ESHUTDOWN", h, errno)
	}
	c.expectClosed()
	eventually(t, "the held IODone gives its bytes back", func() bool { return ts.bytes.stats().held == 0 })
	if st := mem.Stats(); st.Reads != 1 {
		t.Fatalf("%d reads reached the backend, want 1", st.Reads)
	}
}
