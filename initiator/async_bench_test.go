package initiator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
)

// This file measures the command path over the fake iSER target with
// registered (zero-copy) buffers: allocations and time per 4 KiB READ,
// blocking (Do) and asynchronous (Submit).

// iserBenchSession logs in over a fake iSER connection with depth entries
// and registers depth 4 KiB buffers.
func iserBenchSession(tb testing.TB, depth int) (*initiator.Session, [][]byte) {
	tb.Helper()
	fc := isertest.NewConn(1024)
	dm, err := initiator.NewISERDatamover(fc, depth)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.NewSession(ctx, dm, initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:fake", ISID: initiator.NewISID()},
		NOPInterval: -1, QueueDepth: depth})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	mem := make([]byte, depth*4096)
	if err := dm.RegisterIOBuffers(mem); err != nil {
		tb.Fatal(err)
	}
	bufs := make([][]byte, depth)
	for i := range bufs {
		bufs[i] = mem[i*4096 : (i+1)*4096]
	}
	return s, bufs
}

// reader keeps qd 4 KiB READs in flight with Submit: each completion
// starts the next one on its tag until n have completed.
type reader struct {
	s      *initiator.Session
	cmds   []initiator.Command
	mu     sync.Mutex
	left   int // READs still to start
	active int // READs in flight
	err    error
	done   chan struct{}
}

func newReader(s *initiator.Session, bufs [][]byte) *reader {
	r := &reader{s: s, cmds: make([]initiator.Command, len(bufs)), done: make(chan struct{}, 1)}
	for i := range r.cmds {
		r.cmds[i] = initiator.Command{CDB: rw16(0x88, uint64(i*8), 8), Read: bufs[i]}
	}
	return r
}

// run does n READs and waits for them.
func (r *reader) run(n int) error {
	r.mu.Lock()
	r.left, r.err = n, nil
	start := min(n, len(r.cmds))
	r.left -= start
	r.active = start
	r.mu.Unlock()
	for i := range start {
		if err := r.s.Submit(&r.cmds[i], r, initiator.Tag(i)); err != nil {
			return err
		}
	}
	if start > 0 {
		<-r.done
	}
	return r.err
}

// CommandDone implements initiator.CommandDone.
func (r *reader) CommandDone(tag initiator.Tag, res *initiator.Result, err error) {
	r.mu.Lock()
	if err == nil && res.Status != 0 {
		err = errStatus
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	again := r.left > 0 && r.err == nil
	if again {
		r.left--
	} else {
		r.active--
	}
	last := r.active == 0
	r.mu.Unlock()
	if again {
		if err := r.s.Submit(&r.cmds[tag], r, tag); err != nil {
			r.CommandDone(tag, nil, err)
		}
		return
	}
	if last {
		r.done <- struct{}{}
	}
}

type statusError struct{}

func (statusError) Error() string { return "scsi status not GOOD" }

var errStatus error = statusError{}

func BenchmarkSessionReadAsync(b *testing.B) {
	for _, qd := range []int{1, 16} {
		b.Run(qdName(qd), func(b *testing.B) {
			s, bufs := iserBenchSession(b, qd)
			r := newReader(s, bufs)
			if err := r.run(100); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := r.run(b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkSessionReadDo(b *testing.B) {
	s, bufs := iserBenchSession(b, 1)
	cmd := initiator.Command{CDB: rw16(0x88, 0, 8), Read: bufs[0]}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if r, err := s.Do(ctx, &cmd); err != nil || r.Status != 0 {
			b.Fatal(err)
		}
	}
}

func qdName(qd int) string {
	if qd == 1 {
		return "qd1"
	}
	return "qd16"
}
