package initiator

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
)

// This file holds the Multipath's hand-over of its paths' completion
// queues to a frontend's loop (blockdev.Reaping): the loop polls one
// descriptor, an epoll set of every path's reaper descriptor, and Reap
// reaps each path, so that a command ends on the loop's thread whichever
// path carried it. A path whose connection ends, or that gets a new
// session, revokes the whole set: the loop lets it go and takes a new one
// with the paths that are up then.

// mpReaper is the set of path reapers one loop holds.
type mpReaper struct {
	m       *Multipath
	revoked func()
	subs    []blockdev.Reaper // the paths' that handed theirs over
	epfd    int               // an epoll set of the subs' descriptors
	// ended is set once a sub ended, a path changed, or Release ran: Reap
	// then reports false.
	ended    atomic.Bool
	once     sync.Once // revoked is called once
	released bool      // the loop's: Release is idempotent
	// partial: a path that could hand its queue over refused as the set
	// was built (its datamover still had PDUs from before the inline
	// handler, as right after a login). Such a set ends after
	// partialReaps Reaps, so that the loop's next one can include the path
	// (no event tells when it would accept).
	partial bool
	reaps   int // the loop's: Reaps of a partial set
}

// partialReaps is how many Reaps a partial set lives (loop wake-ups: a
// rebuild costs an allocation and an epoll descriptor).
const partialReaps = 256

// Reaper implements blockdev.Reaping: the completion queues of every
// path that can hand its queue over now (an iSER path with a session,
// not held by another loop). false when none can.
func (m *Multipath) Reaper(revoked func()) (blockdev.Reaper, bool) {
	if m.isClosed() {
		return nil, false
	}
	// One set at a time: while a loop holds one, another loop's ask
	// (--queues, NBD connections) allocates nothing and leaves the held
	// set where pathsChanged finds it.
	if m.reaper.Load() != nil {
		return nil, false
	}
	// A path that changes during the scan may be one already passed over
	// while no set was held for pathsChanged to revoke: the generation
	// read first tells (below).
	gen := m.pathGen.Load()
	if m.scanHook != nil {
		m.scanHook()
	}
	// Nothing is allocated, and no descriptor made, while no path could
	// hand its queue over (TCP paths, no session): the loop asks on
	// every wake-up then.
	var r *mpReaper
	for _, p := range m.paths {
		nx := p.nx.Load()
		if nx == nil || !nx.canReap() {
			continue
		}
		if r == nil {
			r = &mpReaper{m: m, revoked: revoked, epfd: -1}
			// Held before the paths are asked: a path that changes
			// meanwhile revokes r, and the loop's first Reap reports
			// the end. Another loop that got here first keeps its set.
			if !m.reaper.CompareAndSwap(nil, r) {
				return nil, false
			}
		}
		sub, ok := nx.Reaper(r.revoke)
		if !ok {
			r.partial = true
			continue
		}
		if r.epfd < 0 {
			epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
			if err != nil {
				sub.Release()
				break
			}
			r.epfd = epfd
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(sub.Fd())}
		if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, sub.Fd(), &ev); err != nil {
			sub.Release()
			continue
		}
		r.subs = append(r.subs, sub)
	}
	if r == nil {
		return nil, false
	}
	if len(r.subs) == 0 {
		m.reaper.CompareAndSwap(r, nil)
		r.once.Do(func() {}) // revoked is not called after this
		if r.epfd >= 0 {
			_ = unix.Close(r.epfd)
		}
		return nil, false
	}
	if m.pathGen.Load() != gen {
		r.revoke() // the loop's first Reap reports the end; the next set follows
	}
	return r, true
}

// revoke ends r and tells its loop, once; from any goroutine.
func (r *mpReaper) revoke() {
	r.ended.Store(true)
	r.once.Do(r.revoked)
}

// pathsChanged revokes the reaper a loop holds, if any: a path got a
// session (or lost one), and the next set should follow.
func (m *Multipath) pathsChanged() {
	m.pathGen.Add(1)
	if r := m.reaper.Load(); r != nil {
		r.revoke()
	}
}

// Fd implements blockdev.Reaper: the epoll set, open until Release.
func (r *mpReaper) Fd() int { return r.epfd }

// Reap implements blockdev.Reaper: it reaps every path's queue; false
// once one of them ended or a path changed.
func (r *mpReaper) Reap() bool {
	if r.ended.Load() {
		return false
	}
	if r.partial {
		if r.reaps++; r.reaps > partialReaps {
			r.revoke()
			return false
		}
	}
	live := true
	for _, sub := range r.subs {
		if !sub.Reap() {
			live = false
		}
	}
	if !live {
		r.revoke()
	}
	return live && !r.ended.Load()
}

// Release implements blockdev.Reaper: every path's poller takes its
// queue back, then the epoll set is closed. After it returns revoked is
// not called any more. Idempotent.
func (r *mpReaper) Release() {
	if r.released {
		return
	}
	r.released = true
	r.ended.Store(true)
	r.m.reaper.CompareAndSwap(r, nil)
	for _, sub := range r.subs {
		sub.Release()
	}
	r.once.Do(func() {}) // a pathsChanged still under way calls nothing now
	_ = unix.Close(r.epfd)
}
