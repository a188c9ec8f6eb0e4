package volume

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/metrics"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// statsController is a fakeController that also answers "stats" from a
// Counting backend.
type statsController struct {
	fakeController
	c *Counting
}

func (s *statsController) Stats() Stats {
	return Stats{Name: s.st.Name, Device: s.st.Device, TimeNanos: time.Now().UnixNano(), IO: s.c.Snapshot()}
}

func TestControlStats(t *testing.T) {
	tempRunDir(t)
	mem := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20})
	c := NewCounting(mem)
	defer c.Close()
	sc := &statsController{fakeController: fakeController{st: Status{Name: "vol1", Device: "/dev/nbd2"}}, c: c}
	s, err := ListenControl("vol1", sc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctx2(t)
	buf := make([]byte, 8192)
	for i := 0; i < 3; i++ {
		if err := c.WriteAt(ctx, buf, int64(i)*8192, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ReadAt(ctx, buf[:4096], 0); err != nil {
		t.Fatal(err)
	}
	_ = c.ReadAt(ctx, buf, 2<<20) // beyond the end: an error
	if err := c.Trim(ctx, 0, 65536); err != nil {
		t.Fatal(err)
	}
	st, err := QueryStats(ctx, SocketPath("vol1"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "vol1" || st.Device != "/dev/nbd2" || st.TimeNanos == 0 {
		t.Fatalf("stats %+v", st)
	}
	w, r, d := st.IO.Op(metrics.OpWrite), st.IO.Op(metrics.OpRead), st.IO.Op(metrics.OpDiscard)
	if w.Count != 3 || w.Bytes != 3*8192 || w.Errors != 0 || r.Count != 2 || r.Bytes != 4096+8192 || r.Errors != 1 ||
		d.Count != 1 || d.Bytes != 65536 {
		t.Fatalf("write %+v read %+v discard %+v", w, r, d)
	}
	var inBuckets uint64
	for _, n := range w.Buckets {
		inBuckets += n
	}
	if inBuckets != 3 || len(st.IO.BoundsSeconds) != len(w.Buckets)-1 {
		t.Fatalf("write histogram %v over %d bounds", w.Buckets, len(st.IO.BoundsSeconds))
	}
	// "status" goes on working next to "stats".
	resp, err := Query(ctx, SocketPath("vol1"), Request{Op: "status"})
	if err != nil || !resp.OK || resp.Status == nil || resp.Status.Name != "vol1" || resp.Stats != nil {
		t.Fatalf("status: %v %+v", err, resp)
	}
}

func TestControlStatsUnsupported(t *testing.T) {
	tempRunDir(t)
	s, err := ListenControl("plain", &fakeController{st: Status{Name: "plain"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := QueryStats(ctx2(t), SocketPath("plain")); err == nil || !strings.Contains(err.Error(), "does not report stats") {
		t.Fatalf("stats from a controller without them: %v", err)
	}
}

func TestCountingInflightAndLatency(t *testing.T) {
	gate := make(chan struct{})
	c := NewCounting(&blockingBackend{Backend: nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20}), gate: gate})
	defer c.Close()
	done := make(chan error)
	go func() { done <- c.Flush(context.Background()) }()
	deadline := time.Now().Add(5 * time.Second)
	for c.Snapshot().Inflight != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the flush in progress is not in flight")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := c.Snapshot()
	f := s.Op(metrics.OpFlush)
	if s.Inflight != 0 || f.Count != 1 || f.LatencySeconds < 0.02 {
		t.Fatalf("after the flush: inflight %d, flush %+v", s.Inflight, f)
	}
}

// blockingBackend holds Flush until gate is closed.
type blockingBackend struct {
	Backend
	gate chan struct{}
}

func (b *blockingBackend) Flush(ctx context.Context) error {
	<-b.gate
	return b.Backend.Flush(ctx)
}

// nopBackend completes every I/O at once: what is left is the counting.
type nopBackend struct{ Backend }

func (nopBackend) ReadAt(context.Context, []byte, int64) error        { return nil }
func (nopBackend) WriteAt(context.Context, []byte, int64, bool) error { return nil }
func (nopBackend) Flush(context.Context) error                        { return errEIO }

var errEIO = errors.New("EIO")

func TestCountingDoesNotAllocate(t *testing.T) {
	c := NewCounting(nopBackend{})
	defer c.Close()
	ctx := context.Background()
	buf := make([]byte, 4096)
	if n := testing.AllocsPerRun(1000, func() {
		_ = c.ReadAt(ctx, buf, 0)
		_ = c.WriteAt(ctx, buf, 0, false)
		_ = c.Flush(ctx) // an error is counted without allocating too
	}); n != 0 {
		t.Fatalf("%v allocations per round of I/O", n)
	}
	if s := c.Snapshot(); s.Op(metrics.OpRead).Count == 0 || s.Op(metrics.OpFlush).Errors == 0 {
		t.Fatalf("nothing counted: %+v", s)
	}
}

// TestCountingTickDoesNotAllocate: the IOPS sampler ticks once a second
// while I/O runs; the fast path's guard (initiator, BenchmarkFastPathRead4K)
// counts every allocation in the process, and failed on a tick that took
// a whole Snapshot (maps and slices) to sum the completed I/Os.
func TestCountingTickDoesNotAllocate(t *testing.T) {
	c := NewCounting(nopBackend{})
	c.Close() // the sampler's own ticks stay out of the way; tick is called by hand
	ctx := context.Background()
	buf := make([]byte, 4096)
	start := time.Now()
	c.lastTime = start
	for range 10 {
		_ = c.ReadAt(ctx, buf, 0)
	}
	_ = c.Flush(ctx)
	c.tick(start.Add(time.Second))
	if got := c.Counters().IOPS; got != 11 {
		t.Fatalf("IOPS %v after 11 I/Os in a second, want 11", got)
	}
	now := start.Add(time.Second)
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Second)
		c.tick(now)
	}); n != 0 {
		t.Fatalf("%v allocations per tick", n)
	}
}

func BenchmarkCountingReadAt(b *testing.B) {
	c := NewCounting(nopBackend{})
	defer c.Close()
	ctx := context.Background()
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.ReadAt(ctx, buf, 0)
	}
}
