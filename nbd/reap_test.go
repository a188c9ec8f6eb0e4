package nbd

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// reapingExport is an export whose backend hands its completions over.
func reapingExport(t *testing.T, size int64) (*testServer, *nbdtest.ReapingMemory, *nbdtest.Memory) {
	m := nbdtest.NewMemory(nbdtest.Config{Size: size, BlockSize: 512})
	pat := make([]byte, size)
	for i := range pat {
		pat[i] = byte(i * 7)
	}
	m.Poke(0, pat)
	rm := m.Reaping()
	ts := startServer(t, []Export{{Name: "r", Backend: rm}}, Options{})
	return ts, rm, m
}

// eventually waits for cond, failing the test after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

// The writer takes the backend's completions over and runs them itself:
// no read's end goes through the backend's own goroutine.
func TestWriterReapsCompletions(t *testing.T) {
	ts, rm, m := reapingExport(t, 1<<20)
	mem := m.Bytes()
	c := dialRaw(t, ts.sock)
	c.goExport("r")
	eventually(t, "the writer holds the reaper", rm.Held)
	const n, depth = 64, 8
	lens := map[uint64]int{}
	sent := 0
	for done := 0; done < n; done++ {
		for ; sent < n && sent-done < depth; sent++ {
			lens[uint64(sent)] = 4096
			c.send(request{Type: cmdRead, Handle: uint64(sent), Offset: uint64(sent%256) * 4096, Length: 4096}, nil)
		}
		h, errno, data := c.readReply(lens)
		if errno != 0 {
			t.Fatalf("read %d: errno %d", h, errno)
		}
		off := (h % 256) * 4096
		if !bytes.Equal(data, mem[off:off+4096]) {
			t.Fatalf("read %d: wrong data", h)
		}
		delete(lens, h)
	}
	st := rm.ReapStats()
	if st.Reaped != n || st.Direct != 0 || st.Takes != 1 {
		t.Fatalf("%+v: want all %d reaped by the writer, with one take", st, n)
	}
}

// A writer about to wait for a client that does not take its replies
// first gives the completions back: the backend's goroutine completes
// meanwhile, so no command waits on a slow client.
func TestWriterReleasesCompletionsToSlowClient(t *testing.T) {
	ts, rm, m := reapingExport(t, 32<<20)
	c := dialRaw(t, ts.sock)
	c.goExport("r")
	eventually(t, "the writer holds the reaper", rm.Held)
	const n, size = 16, 1 << 20 // far more than the socket buffers
	// The first 4 reads fill the socket; the rest end only once the
	// writer waits for the client.
	gate := make(chan struct{})
	m.SetHook(func(_ context.Context, op nbdtest.Op, off, _ int64) error {
		if off >= 4*size {
			<-gate
		}
		return nil
	})
	lens := map[uint64]int{}
	for i := 0; i < n; i++ {
		lens[uint64(i)] = size
		c.send(request{Type: cmdRead, Handle: uint64(i), Offset: uint64(i) * size, Length: size}, nil)
	}
	eventually(t, "the blocked writer releases the reaper", func() bool { return !rm.Held() })
	close(gate)
	eventually(t, "the backend's goroutine completes the rest", func() bool {
		return rm.ReapStats().Direct >= n-4
	})
	mem := m.Bytes()
	for i := 0; i < n; i++ {
		h, errno, data := c.readReply(lens)
		if errno != 0 || !bytes.Equal(data, mem[h*size:(h+1)*size]) {
			t.Fatalf("read %d: errno %d, or wrong data", h, errno)
		}
	}
	// Idle again, the writer takes the completions back.
	eventually(t, "the idle writer takes the reaper again", rm.Held)
	if errno, _ := c.do(request{Type: cmdRead, Handle: 99, Length: 4096}, nil); errno != 0 {
		t.Fatalf("read after: errno %d", errno)
	}
}

// When the backend takes its completion source back (its connection
// ended), the writer lets it go and asks again once idle; replies keep
// coming in between.
func TestWriterRevokedReaper(t *testing.T) {
	ts, rm, _ := reapingExport(t, 1<<20)
	c := dialRaw(t, ts.sock)
	c.goExport("r")
	eventually(t, "the writer holds the reaper", rm.Held)
	rm.Revoke()
	eventually(t, "the writer releases a revoked reaper", func() bool { return rm.ReapStats().Releases == 1 })
	for i := 0; i < 4; i++ {
		if errno, _ := c.do(request{Type: cmdRead, Handle: uint64(i), Length: 4096}, nil); errno != 0 {
			t.Fatalf("read %d: errno %d", i, errno)
		}
	}
	eventually(t, "the writer takes the reaper again", func() bool { return rm.ReapStats().Takes == 2 && rm.Held() })
}

// The writer's eventfd stays open until transmit has ended the writer and
// closed the reply queue: closeReplies may still be about to wake a writer
// that another wake-up already ended, and its write must not land in a
// descriptor that reused the number.
func TestWriterEventfdOutlivesLastWake(t *testing.T) {
	ts, rm, _ := reapingExport(t, 1<<20)
	c := dialRaw(t, ts.sock)
	c.goExport("r")
	eventually(t, "the writer holds the reaper", rm.Held)
	inGap, proceed := make(chan int, 1), make(chan struct{})
	var once sync.Once
	testWakeGap = func(efd int) {
		once.Do(func() {
			inGap <- efd
			<-proceed
		})
	}
	defer func() { testWakeGap = nil }()
	c.send(request{Type: cmdDisc}, nil) // the reader ends: closeReplies wakes the writer
	<-inGap
	rm.Nudge() // the writer wakes without the eventfd, finds the queue closed, ends
	eventually(t, "the writer ends", func() bool { return !rm.Held() })
	probe, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(probe)
	close(proceed)
	eventually(t, "the connection ends", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return len(ts.conns) == 0
	})
	var buf [8]byte
	if n, err := unix.Read(probe, buf[:]); err == nil {
		t.Fatalf("the last wake-up wrote %d bytes into descriptor %d, which reused the writer's eventfd", n, probe)
	}
}

// refusingSource is a completion source that never hands its completions
// over, as an iSCSI/TCP session's LUN.
type refusingSource struct{ *nbdtest.Memory }

func (refusingSource) Reaper(func()) (blockdev.Reaper, bool) { return nil, false }

// A writer whose backend never hands its completions over makes no
// eventfd: it never sleeps in poll, so nothing would ever write it.
func TestReaperWithoutSourceMakesNoEventfd(t *testing.T) {
	a, b := tcpPair(t)
	defer b.Close()
	r := newReaper(refusingSource{nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20, BlockSize: 512})}, a)
	if r == nil {
		t.Fatal("no reaper for a Reaping backend on a TCP socket")
	}
	for i := 0; i < 3; i++ {
		if r.wait() {
			t.Fatal("wait reports a held source")
		}
	}
	if r.efd != -1 {
		t.Fatalf("eventfd %d made for a source that is never held", r.efd)
	}
	r.release()
	r.close()
}

// tcpPair is a connected loopback TCP pair, closed with the test.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
