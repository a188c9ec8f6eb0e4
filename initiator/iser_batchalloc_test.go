package initiator_test

import (
	"runtime"
	"testing"
)

// TestISERLargestBatchAllocatesNothing: the SENDs a batch queues go to a
// list sized for the whole send queue when the connection is made, so
// the first batch larger than any before (32 reads started in one pass,
// after 32 reads in flight that were posted one at a time) allocates
// nothing. It used to grow the list then, which made the fast-path guard
// (BenchmarkFastPathRead4K) fail now and then. The test reaps the
// completions itself (blockdev.Reaping), so every read of both rounds is
// in flight at once.
func TestISERLargestBatchAllocatesNothing(t *testing.T) {
	const depth = 32
	l, rp, _ := reapingLUN(t, "batchalloc", depth)
	bufs := make([][]byte, depth)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	d := &reapDone{errs: make(chan error, depth)}
	reapAll := func() {
		for got := 0; got < depth; {
			d.reap(t, rp)
			for ; ; got++ {
				select {
				case err := <-d.errs:
					if err != nil {
						t.Fatal(err)
					}
					continue
				default:
				}
				break
			}
		}
	}
	// Warm up: depth reads in flight, each posted on its own.
	for i := range depth {
		l.StartRead(bufs[i], int64(i)*4096, d, uint32(i))
	}
	reapAll()

	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = rate }()
	before := pathAllocs()
	b := l.BeginBatch()
	for i := range depth {
		l.StartRead(bufs[i], int64(i)*4096, d, uint32(i))
	}
	l.EndBatch(b)
	reapAll()
	for stk, a := range pathAllocs() {
		if n := a.n - before[stk].n; n > 0 {
			t.Errorf("%d reads in one batch: %d allocations at %s", depth, n, a.where)
		}
	}
}
