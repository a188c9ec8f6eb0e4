package ublk

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/rawwait"

	"golang.org/x/sys/unix"
)

// stuckBackend is a memBackend whose reads at offset at hang until their
// context is cancelled, then keep running until late is closed and only
// then write into the request buffer: a backend call that outlives its
// cancellation, as a LUN command does until its abort escalation ends
// (initiator.Session.Do). Other reads are served.
type stuckBackend struct {
	*memBackend
	at      int64
	started chan struct{}
	late    chan struct{}
}

func newStuckBackend(at int64) *stuckBackend {
	return &stuckBackend{memBackend: newMemBackend(32<<20, 4096), at: at, started: make(chan struct{}, 64),
		late: make(chan struct{})}
}

func (s *stuckBackend) ReadAt(ctx context.Context, p []byte, off int64) error {
	if off != s.at {
		return s.memBackend.ReadAt(ctx, p, off)
	}
	s.started <- struct{}{}
	<-ctx.Done()
	<-s.late
	clear(p) // the late write: the buffer must still be ours
	return ctx.Err()
}

// A stopping loop ends when nothing is in flight and the driver has been
// quiet for a moment, or holds every tag; with calls in flight only once
// it gives up on them; a running loop only when every tag was aborted.
func TestDrainStateEnded(t *testing.T) {
	now := time.Now()
	recent, quiet := now.Add(-quietPeriod/2), now.Add(-quietPeriod)
	for _, tc := range []struct {
		name string
		s    drainState
		want bool
	}{
		{"serving", drainState{outstanding: 16, lastRequest: quiet}, false},
		{"serving, calls in flight", drainState{outstanding: 10, inflight: 6}, false},
		{"every tag aborted", drainState{}, true},
		{"aborted, calls in flight", drainState{inflight: 2}, false},
		{"quit, idle, quiet", drainState{quit: true, outstanding: 16, lastRequest: quiet}, true},
		{"quit, idle, a request just came", drainState{quit: true, outstanding: 15, lastRequest: recent}, false},
		{"quit, every tag held", drainState{quit: true, outstanding: 0, lastRequest: now}, true},
		{"quit, calls in flight", drainState{quit: true, outstanding: 12, inflight: 4, lastRequest: quiet}, false},
		{"quit, gave up on calls in flight", drainState{quit: true, gaveUp: true, outstanding: 12, inflight: 4, lastRequest: now}, true},
	} {
		if got := tc.s.ended(now); got != tc.want {
			t.Errorf("%s: ended = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A backend call abandoned at detach keeps its buffer and the eventfd it
// signals: the queue lets them go only when the call has returned, so its
// late write lands in memory still mapped and its wake-up in its own
// eventfd, never in a file that took the number over.
func TestQueueReleaseWaitsForAbandonedCall(t *testing.T) {
	zero, err := os.Open("/dev/zero") // stands in for /dev/ublkcN's descriptor mapping
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	b := newStuckBackend(0)
	bufs, err := newIOBuffers(b, 2, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	q, err := newQueue(0, 2, int(zero.Fd()), os.Getpagesize(), b, bufs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	q.ctx, q.st = ctx, &stats{}
	q.workers.Add(1)
	go q.work(1, desc(ioOpRead, 0, 0, 128))
	<-b.started
	q.watchIdle() // as the loop does when it ends
	cancel()
	q.release()
	q.release()
	efd := q.efd
	if _, err := unix.FcntlInt(uintptr(efd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("eventfd closed while a backend call still runs: %v", err)
	}
	close(b.late) // the call returns, writing into its buffer first
	select {
	case <-q.idle:
	case <-time.After(10 * time.Second):
		t.Fatal("the returned call never made the queue idle")
	}
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		_, err := unix.FcntlInt(uintptr(efd), unix.F_GETFD, 0)
		if errors.Is(err, unix.EBADF) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("eventfd %d still open after the last call returned (%v)", efd, err)
		}
	}
	if n := len(q.done); n != 1 {
		t.Errorf("%d completions recorded, want the abandoned call's 1", n)
	}
}

// A loop waits raw (keeping its P) only while it serves requests: once
// idle, or when stopping, it waits the usual way.
func TestDrainStateRawWait(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name string
		s    drainState
		want bool
	}{
		{"serving", drainState{lastRequest: now.Add(-time.Millisecond)}, true},
		{"idle", drainState{lastRequest: now.Add(-rawwait.Idle)}, false},
		{"never served", drainState{}, false},
		{"stopping", drainState{quit: true, lastRequest: now}, false},
	} {
		if got := c.s.rawWait(now); got != c.want {
			t.Errorf("%s: rawWait %v, want %v", c.name, got, c.want)
		}
	}
}
