package counting

import (
	"context"
	"errors"
	"testing"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/metrics"
)

// asyncNop is a backend with blockdev.Async that ends every request at
// once, with err; its blocking calls must not be used.
type asyncNop struct {
	nopBackend
	err    error
	starts int
}

func (a *asyncNop) ReadAt(context.Context, []byte, int64) error {
	panic("blocking ReadAt used on a blockdev.Async backend")
}

func (a *asyncNop) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	a.starts++
	done.IODone(tag, a.err)
}

func (a *asyncNop) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	a.starts++
	done.IODone(tag, a.err)
}

// doneFunc adapts a function to blockdev.Done.
type doneFunc func(tag uint32, err error)

func (f doneFunc) IODone(tag uint32, err error) { f(tag, err) }

// A counting Backend passes asynchronous requests to the backend's own
// Async and counts each once, when it ends, errors included; without the
// allocation of a request on the way.
func TestCountingAsync(t *testing.T) {
	a := &asyncNop{}
	c := New(a)
	defer c.Close()
	var got []uint32
	var gotErr error
	done := doneFunc(func(tag uint32, err error) { got, gotErr = append(got, tag), err })
	buf := make([]byte, 4096)
	c.StartRead(buf, 0, done, 3)
	c.StartWrite(buf[:512], 4096, true, done, 4)
	a.err = errEIO
	var failed []string
	c.OnError = func(op string, off, n int64, err error) { failed = append(failed, op) }
	c.StartWrite(buf, 0, false, done, 5)
	if a.starts != 3 || len(got) != 3 || got[2] != 5 || !errors.Is(gotErr, errEIO) {
		t.Fatalf("starts %d, ends %v (last %v)", a.starts, got, gotErr)
	}
	s := c.Snapshot()
	r, w := s.Op(metrics.OpRead), s.Op(metrics.OpWrite)
	if r.Count != 1 || r.Bytes != 4096 || w.Count != 2 || w.Bytes != 512+4096 || w.Errors != 1 || s.Inflight != 0 {
		t.Errorf("read %+v, write %+v, inflight %d", r, w, s.Inflight)
	}
	if len(failed) != 1 || failed[0] != "write" {
		t.Errorf("OnError calls %v", failed)
	}
	a.err = nil
	c.OnError = nil
	if n := testing.AllocsPerRun(1000, func() { c.StartRead(buf, 0, done, 1) }); n != 0 {
		t.Errorf("%v allocations per asynchronous read", n)
	}
}

// Over a backend without Async, a counting Backend runs the blocking calls
// on a goroutine, split at the backend's MaxTransfer, and counts each call.
func TestCountingAsyncOverBlockingBackend(t *testing.T) {
	c := New(splitBackend{})
	defer c.Close()
	ch := make(chan error, 1)
	c.StartWrite(make([]byte, 3*4096), 0, false, doneFunc(func(_ uint32, err error) { ch <- err }), 0)
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	if w := c.Snapshot().Op(metrics.OpWrite); w.Count != 3 || w.Bytes != 3*4096 {
		t.Errorf("write %+v, want 3 calls of 4096 bytes", w)
	}
}

// splitBackend takes at most 4 KiB per call.
type splitBackend struct{ nopBackend }

func (splitBackend) MaxTransfer() uint32 { return 4096 }

func (splitBackend) WriteAt(_ context.Context, p []byte, _ int64, _ bool) error {
	if len(p) > 4096 {
		return errors.New("more than MaxTransfer in one call")
	}
	return nil
}

// fastBackend has every fast-path capability, as an initiator.LUN over a
// Nexus on iSER: requests end only when a loop reaps them, batches are
// counted, and it hands out buffers.
type fastBackend struct {
	nopBackend
	pending []func()
	batches int
	bufs    [][]byte
}

func (f *fastBackend) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	f.pending = append(f.pending, func() { done.IODone(tag, nil) })
}

func (f *fastBackend) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	f.pending = append(f.pending, func() { done.IODone(tag, errEIO) })
}

func (f *fastBackend) BeginBatch() blockdev.Batch { f.batches++; return blockdev.Batch{Held: f} }
func (f *fastBackend) EndBatch(blockdev.Batch)    {}

func (f *fastBackend) Reaper(func()) (blockdev.Reaper, bool) { return fastReaper{f}, true }

func (f *fastBackend) IOBuffers(count, size int) ([][]byte, error) { return f.bufs, nil }

type fastReaper struct{ f *fastBackend }

func (r fastReaper) Fd() int  { return -1 }
func (r fastReaper) Release() {}
func (r fastReaper) Reap() bool {
	p := r.f.pending
	r.f.pending = nil
	for _, end := range p {
		end()
	}
	return true
}

var (
	_ blockdev.Async          = (*fastBackend)(nil)
	_ blockdev.Batcher        = (*fastBackend)(nil)
	_ blockdev.Reaping        = (*fastBackend)(nil)
	_ blockdev.BufferProvider = (*fastBackend)(nil)
)

// A frontend that finds its capabilities with blockdev.As on a counting
// Backend gets its Async (so requests are counted) and the backend's own
// Batcher, Reaping and buffers; requests started in a batch and ended by
// the loop's Reap are counted once each.
func TestCountingFastPathThroughAs(t *testing.T) {
	f := &fastBackend{bufs: [][]byte{make([]byte, 4096)}}
	c := New(f)
	defer c.Close()
	a, ok := blockdev.As[blockdev.Async](c)
	if !ok || a != blockdev.Async(c) {
		t.Fatalf("As[Async] = %T, want the Backend (it counts)", a)
	}
	bt, ok := blockdev.As[blockdev.Batcher](c)
	if !ok || bt != blockdev.Batcher(f) {
		t.Fatalf("As[Batcher] = %T, want the backend's", bt)
	}
	rs, ok := blockdev.As[blockdev.Reaping](c)
	if !ok || rs != blockdev.Reaping(f) {
		t.Fatalf("As[Reaping] = %T, want the backend's", rs)
	}
	bp, ok := blockdev.As[blockdev.BufferProvider](c)
	if !ok {
		t.Fatal("no BufferProvider behind the Backend")
	}
	if bufs, err := bp.IOBuffers(1, 4096); err != nil || &bufs[0][0] != &f.bufs[0][0] {
		t.Fatalf("As[BufferProvider] = %T, %v: want the backend's buffers", bp, err)
	}
	rp, _ := rs.Reaper(func() {})
	var ended []uint32
	done := doneFunc(func(tag uint32, err error) { ended = append(ended, tag) })
	buf := f.bufs[0]
	b := bt.BeginBatch()
	a.StartRead(buf, 0, done, 1)
	a.StartWrite(buf[:512], 0, false, done, 2)
	bt.EndBatch(b)
	if s := c.Snapshot(); s.Inflight != 2 {
		t.Fatalf("%d requests in flight before the reap, want 2", s.Inflight)
	}
	rp.Reap()
	if len(ended) != 2 || f.batches != 1 {
		t.Fatalf("ended %v in %d batches", ended, f.batches)
	}
	s := c.Snapshot()
	r, w := s.Op(metrics.OpRead), s.Op(metrics.OpWrite)
	if r.Count != 1 || r.Bytes != 4096 || w.Count != 1 || w.Errors != 1 || s.Inflight != 0 {
		t.Errorf("read %+v, write %+v, inflight %d: the reaped completions were not counted", r, w, s.Inflight)
	}
}
