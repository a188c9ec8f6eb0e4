package counting

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/metrics"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

func TestCounting(t *testing.T) {
	mem := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20})
	c := New(mem)
	defer c.Close()
	ctx := context.Background()
	buf := make([]byte, 4096)
	if err := c.WriteAt(ctx, buf, 0, false); err != nil {
		t.Fatal(err)
	}
	_ = c.ReadAt(ctx, buf, 0)
	_ = c.Flush(ctx)
	_ = c.ReadAt(ctx, buf, 2<<20) // out of range: an error
	got := c.Counters()
	if got.Writes != 1 || got.Reads != 2 || got.WriteBytes != 4096 || got.Flushes != 1 || got.Errors != 1 {
		t.Fatalf("counters %+v", got)
	}
}

func TestCountingInflightAndLatency(t *testing.T) {
	gate := make(chan struct{})
	c := New(&blockingBackend{Backend: nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20}), gate: gate})
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
	blockdev.Backend
	gate chan struct{}
}

func (b *blockingBackend) Flush(ctx context.Context) error {
	<-b.gate
	return b.Backend.Flush(ctx)
}

// nopBackend completes every I/O at once: what is left is the counting.
type nopBackend struct{ blockdev.Backend }

func (nopBackend) ReadAt(context.Context, []byte, int64) error        { return nil }
func (nopBackend) WriteAt(context.Context, []byte, int64, bool) error { return nil }
func (nopBackend) Flush(context.Context) error                        { return errEIO }

var errEIO = errors.New("EIO")

func TestCountingDoesNotAllocate(t *testing.T) {
	c := New(nopBackend{})
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
	c := New(nopBackend{})
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
	c := New(nopBackend{})
	defer c.Close()
	ctx := context.Background()
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.ReadAt(ctx, buf, 0)
	}
}
