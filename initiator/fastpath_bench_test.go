package initiator_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/initiator"
)

// This file guards the fast path: a 4 KiB read as ublk starts it (through
// counting.Backend and a LUN's blockdev.Async, on a Nexus over iSER with
// registered buffers), against the fake iSER target. `make test` runs it
// once (-benchtime=1x, 4000 reads per run); it fails when the path
// allocates, or hands a read between goroutines more than once (the
// datamover's poller taking the completion, as a kernel initiator takes
// it in its completion handler). The fake target runs on a goroutine of
// its own, like the far end of the wire: its allocations and its wake-up
// per command are not the initiator's, and are counted apart.

const fastPathIOs = 4000

func BenchmarkFastPathRead4K(b *testing.B) {
	// Two paths at QD1 only: at QD16 the share of the reads each path
	// holds at once varies, and its pools and backlog reach their peak
	// slowly (1-5 allocations per 4000 reads after warm-up, fewer run by
	// run, all in freelist.Get and Session.Submit's backlog), which a
	// guard of none cannot tell from a leak.
	for _, tc := range []struct {
		qd    int
		reap  bool
		paths int
	}{{1, false, 1}, {16, false, 1}, {1, true, 1}, {16, true, 1}, {1, true, 2}} {
		qd := tc.qd
		name := fmt.Sprintf("qd%d", qd)
		if tc.reap {
			name += "-reaped"
		}
		if tc.paths > 1 {
			name += fmt.Sprintf("-%dpaths", tc.paths)
		}
		b.Run(name, func(b *testing.B) {
			d := newFastPathDriver(b, qd, tc.paths)
			if tc.reap {
				d.reapLoop()
			}
			if err := d.run(500); err != nil { // warm-up: pools, queues, timers
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var allocs, handoffs float64
			for range b.N {
				a, h, err := d.measure(fastPathIOs)
				if err != nil {
					b.Fatal(err)
				}
				allocs, handoffs = max(allocs, a), max(handoffs, h)
			}
			b.StopTimer()
			b.ReportMetric(allocs, "path-allocs/io")
			b.ReportMetric(handoffs, "handoffs/io")
			if allocs > 0 {
				b.Errorf("the fast path allocates: %.3f allocations per read (profile above)", allocs)
			}
			// One wake-up of the poller per read, and one of the fake
			// target, at QD1; fewer when completions come in batches. A
			// loop that reaps itself waits in poll(2), not parked: only
			// the fake target's wake-up is left.
			switch {
			case !tc.reap && handoffs > 2.25:
				b.Errorf("%.2f goroutine wake-ups per read; want at most 2 (the fake target's, the poller's)", handoffs)
			case tc.reap && handoffs > 1.25:
				b.Errorf("%.2f goroutine wake-ups per read with the loop reaping; want at most 1 (the fake target's)", handoffs)
			}
		})
	}
}

// fastPathDriver keeps qd reads in flight: each IODone starts the next
// read on its tag, on the goroutine that reported it.
type fastPathDriver struct {
	tb   testing.TB
	c    *counting.Backend
	a    blockdev.Async // c, found as ublk finds it
	bufs [][]byte
	left atomic.Int64
	act  atomic.Int64
	mu   sync.Mutex
	err  error
	done chan struct{}
}

// newFastPathDriver reads through one Nexus, or with paths > 1 through a
// Multipath of that many (which has no registered buffers: its reads go
// through the paths' bounce buffers).
func newFastPathDriver(tb testing.TB, qd, paths int) *fastPathDriver {
	var exec initiator.Executor
	if paths > 1 {
		cfg := initiator.MultipathConfig{NoPathTimeout: 5 * time.Second}
		for i := range paths {
			nc := fakeISERNexusConfig(fmt.Sprint("fastpath", i), qd)
			nc.Portals = []string{fmt.Sprintf("fake-iser-%d:3260", i)}
			initiator.SetNexusConnect(&nc, (&fakeISERConns{}).connect(1<<15, qd))
			cfg.Paths = append(cfg.Paths, nc)
		}
		m, err := initiator.DialMultipath(ctx5(tb), cfg)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { m.Close() })
		exec = m
	} else {
		nx, _ := dialFakeISERNexus(tb, "fastpath", qd, 1<<15)
		exec = nx
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := initiator.OpenLUN(ctx, exec, 0)
	if err != nil {
		tb.Fatal(err)
	}
	c := counting.New(l)
	tb.Cleanup(func() { c.Close() })
	// What ublk finds behind the counting backend: its Async, the Nexus's buffers.
	a, ok := blockdev.As[blockdev.Async](c)
	if !ok {
		tb.Fatal("counting.Backend is no blockdev.Async")
	}
	bp, ok := blockdev.As[blockdev.BufferProvider](c)
	if !ok {
		tb.Fatal("no blockdev.BufferProvider behind counting.Backend")
	}
	bufs, err := bp.IOBuffers(qd, 64<<10)
	if paths > 1 && err == nil && bufs == nil {
		for range qd {
			bufs = append(bufs, make([]byte, 64<<10))
		}
	}
	if err != nil || len(bufs) != qd {
		tb.Fatalf("%d I/O buffers from the LUN over iSER (%v), want %d", len(bufs), err, qd)
	}
	return &fastPathDriver{tb: tb, c: c, a: a, bufs: bufs, done: make(chan struct{}, 1)}
}

// reapLoop takes the completion queue over, as a ublk queue loop does:
// on a locked thread, waiting in poll(2) on the reaper's descriptor and
// reaping on it (each IODone starts the next read right there). It ends
// at cleanup.
func (d *fastPathDriver) reapLoop() {
	rs, ok := blockdev.As[blockdev.Reaping](d.c)
	if !ok {
		d.tb.Fatal("the fast path's LUN is no blockdev.Reaping behind counting.Backend")
	}
	rp, ok := rs.Reaper(func() {})
	if !ok {
		d.tb.Fatal("the fast path's LUN did not hand its completion queue over")
	}
	stop := make(chan struct{})
	out := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(out)
		defer rp.Release()
		fds := []unix.PollFd{{Fd: int32(rp.Fd()), Events: unix.POLLIN}}
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = unix.Poll(fds, 50)
			if !rp.Reap() {
				return
			}
		}
	}()
	d.tb.Cleanup(func() {
		close(stop)
		<-out
	})
}

func (d *fastPathDriver) start(tag uint32) {
	d.a.StartRead(d.bufs[tag][:4096], int64(tag)*4096, d, tag)
}

// IODone implements blockdev.Done.
func (d *fastPathDriver) IODone(tag uint32, err error) {
	if err != nil {
		d.mu.Lock()
		if d.err == nil {
			d.err = err
		}
		d.mu.Unlock()
	}
	if err == nil && d.left.Add(-1) >= 0 {
		d.start(tag)
		return
	}
	if d.act.Add(-1) == 0 {
		d.done <- struct{}{}
	}
}

// run does n reads, qd at a time, and waits for them.
func (d *fastPathDriver) run(n int) error {
	qd := min(n, len(d.bufs))
	d.left.Store(int64(n - qd))
	d.act.Store(int64(qd))
	for i := range qd {
		d.start(uint32(i))
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%d reads still running after 30 s", d.act.Load())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// measure runs n reads and returns the allocations the initiator's code
// made per read (profiled, every allocation sampled) and the goroutine
// wake-ups per read.
func (d *fastPathDriver) measure(n int) (allocs, handoffs float64, err error) {
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = rate }()
	before := pathAllocs()
	wakes0 := schedWakes()
	if err := d.run(n); err != nil {
		return 0, 0, err
	}
	wakes := schedWakes() - wakes0
	after := pathAllocs()
	var total int64
	for stk, a := range after {
		if da := a.n - before[stk].n; da > 0 {
			total += da
			d.tb.Logf("%d allocations at %s", da, a.where)
		}
	}
	// /sched/latencies samples one in 8 scheduling events per goroutine
	// (runtime gTrackingPeriod).
	return float64(total) / float64(n), float64(wakes) * 8 / float64(n), nil
}

type siteAllocs struct {
	n     int64
	where string
}

// pathAllocs returns, per allocation site, the allocations made by the
// project's non-test code: the innermost frame from one of its packages
// decides, passing over runtime and standard-library frames and the codec
// packages (pdu, scsi) that the fake target shares; a site under the fake
// target or test code is not the path's.
func pathAllocs() map[[32]uintptr]siteAllocs {
	runtime.GC()
	runtime.GC() // the profile is as of the last GC cycle
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	out := make(map[[32]uintptr]siteAllocs)
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			fn := f.Function
			switch {
			case strings.HasSuffix(f.File, "_test.go"), strings.Contains(fn, "/initiator/isertest."):
				more = false // the fake target's or the test's
			case strings.HasPrefix(fn, "github.com/iser-attach/iser-attach/") &&
				!strings.Contains(fn, "/initiator/pdu.") && !strings.Contains(fn, "/initiator/scsi."):
				out[r.Stack0] = siteAllocs{n: r.AllocObjects, where: fmt.Sprintf("%s (%s:%d)", fn, f.File, f.Line)}
				more = false
			}
			if !more {
				break
			}
		}
	}
	return out
}

// schedWakes is the runtime's count of sampled goroutine scheduling
// events (runnable to running).
func schedWakes() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}
