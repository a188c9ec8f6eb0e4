package nbdtest

import (
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
)

// ReapingMemory is an AsyncMemory whose completions a frontend's loop may
// reap itself (blockdev.Reaping), as an iSER LUN's: while a Reaper is
// held, a finished request waits in a queue and the Reaper's eventfd
// becomes readable; otherwise, or once the Reaper is released, IODone
// runs on the request's own goroutine (the backend's). Revoke takes the
// source back as a failing connection does.
type ReapingMemory struct {
	AsyncMemory

	mu       sync.Mutex
	held     bool
	efd      int
	revoked  func()
	ended    bool         // Revoke ran: Reap reports false
	queue    []completion // finished while held
	reaped   atomic.Int64
	direct   atomic.Int64
	takes    atomic.Int64
	releases atomic.Int64
	pending  atomic.Int64 // started, IODone not yet returned
	maxPend  atomic.Int64
}

type completion struct {
	done blockdev.Done
	tag  uint32
	err  error
}

// Reaping returns m with blockdev.Async and blockdev.Reaping.
func (m *Memory) Reaping() *ReapingMemory { return &ReapingMemory{AsyncMemory: m.Async(), efd: -1} }

// ReapStats counts what happened to the completions and the source.
type ReapStats struct {
	Reaped, Direct  int64 // IODone calls from Reap, and from the backend's goroutines
	Takes, Releases int64
	MaxPending      int64 // most requests started and not yet ended at once
}

// ReapStats returns the counts so far.
func (r *ReapingMemory) ReapStats() ReapStats {
	return ReapStats{Reaped: r.reaped.Load(), Direct: r.direct.Load(),
		Takes: r.takes.Load(), Releases: r.releases.Load(), MaxPending: r.maxPend.Load()}
}

// Held reports whether a Reaper is held.
func (r *ReapingMemory) Held() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// StartRead implements blockdev.Async.
func (r *ReapingMemory) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	r.started()
	go func() {
		r.finish(done, tag, blockdev.Split(p, off, int(r.cfg.MaxTransfer), func(p []byte, off int64) error {
			return r.ReadAt(context.Background(), p, off)
		}))
	}()
}

// StartWrite implements blockdev.Async.
func (r *ReapingMemory) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	r.started()
	go func() {
		r.finish(done, tag, blockdev.Split(p, off, int(r.cfg.MaxTransfer), func(p []byte, off int64) error {
			return r.WriteAt(context.Background(), p, off, fua)
		}))
	}()
}

func (r *ReapingMemory) started() {
	n := r.pending.Add(1)
	for {
		m := r.maxPend.Load()
		if n <= m || r.maxPend.CompareAndSwap(m, n) {
			return
		}
	}
}

// end runs a request's IODone.
func (r *ReapingMemory) end(c completion) {
	c.done.IODone(c.tag, c.err)
	r.pending.Add(-1)
}

func (r *ReapingMemory) finish(done blockdev.Done, tag uint32, err error) {
	r.mu.Lock()
	if r.held {
		r.queue = append(r.queue, completion{done, tag, err})
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(r.efd, one[:])
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.direct.Add(1)
	r.end(completion{done, tag, err})
}

var (
	_ blockdev.Async   = (*ReapingMemory)(nil)
	_ blockdev.Reaping = (*ReapingMemory)(nil)
	_ blockdev.Reaper  = memReaper{}
)

// Reaper implements blockdev.Reaping.
func (r *ReapingMemory) Reaper(revoked func()) (blockdev.Reaper, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held {
		return nil, false
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, false
	}
	r.held, r.efd, r.revoked, r.ended = true, efd, revoked, false
	r.takes.Add(1)
	return memReaper{r}, true
}

// Nudge makes the held Reaper's descriptor readable with nothing to reap,
// as another connection's completion does.
func (r *ReapingMemory) Nudge() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held {
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(r.efd, one[:])
	}
}

// Revoke takes the source back from its holder, as a connection that
// ends does: the holder's revoked runs, Reap reports false.
func (r *ReapingMemory) Revoke() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held && !r.ended {
		r.ended = true
		r.revoked()
	}
}

type memReaper struct{ r *ReapingMemory }

func (h memReaper) Fd() int {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.r.efd
}

func (h memReaper) Reap() bool {
	r := h.r
	r.mu.Lock()
	var buf [8]byte
	_, _ = unix.Read(r.efd, buf[:])
	q, ended := r.queue, r.ended
	r.queue = nil
	r.mu.Unlock()
	for _, c := range q {
		r.reaped.Add(1)
		r.end(c)
	}
	return !ended
}

func (h memReaper) Release() {
	r := h.r
	r.mu.Lock()
	q := r.queue
	r.queue, r.held, r.revoked = nil, false, nil
	unix.Close(r.efd)
	r.efd = -1
	r.mu.Unlock()
	r.releases.Add(1)
	go func() { // the backend's goroutine completes what was left
		for _, c := range q {
			r.direct.Add(1)
			r.end(c)
		}
	}()
}
