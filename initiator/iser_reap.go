package initiator

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/rdma"
)

// This file holds the hand-over of the iSER completion queue to a
// frontend's loop (blockdev.Reaping): while a loop reaps, the poller
// goroutine parks, and the loop polls the CQ and runs the completions on
// its own thread when the connection's descriptor wakes it. One wake-up
// per I/O instead of two (the poller's, then the loop's by eventfd), and
// no thread asleep in a system call while the other runs.

// reapableConn is an RDMA connection whose completions can be taken
// without blocking, with a descriptor that says when to look
// (rdma.Conn.TryPoll and PollFd).
type reapableConn interface {
	// TryPoll takes what completions wait without blocking; fewer than
	// len(out) means the queue was emptied and will signal PollFd again.
	TryPoll(out []rdma.Completion) (int, error)
	PollFd() int
}

// iserReaper is the CQ handed to a loop; d.reaper while it holds it.
type iserReaper struct {
	d       *ISERDatamover
	revoked func()
	wcs     []rdma.Completion
	// fd is a duplicate of the connection's PollFd, the loop's to poll
	// until Release closes it: the connection may close (and its
	// descriptor number be reused) while the loop still holds r.
	fd       int
	released bool // the loop's: Release is idempotent
	// ended is set, under d.mu, once r no longer holds a live connection:
	// the connection fails or closes (revokeLocked), or Release. Reap
	// looks at it without the lock, twice per call.
	ended atomic.Bool
}

// TakeReaper hands the completion queue to a loop (see blockdev.Reaping):
// the poller parks until Release. It refuses while another loop holds
// it, during login (before the inline handler), or once closing.
func (d *ISERDatamover) TakeReaper(revoked func()) (blockdev.Reaper, bool) {
	if d.reapConn == nil {
		return nil, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.reaper != nil || d.inline.Load() == nil || len(d.pdus) > 0 {
		return nil, false
	}
	// Not closed under d.mu: the connection, and its descriptor, are open.
	pfd := d.reapConn.PollFd()
	if pfd < 0 {
		return nil, false
	}
	fd, err := unix.FcntlInt(uintptr(pfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	r := &iserReaper{d: d, revoked: revoked, wcs: make([]rdma.Completion, iserPollBatch), fd: fd}
	d.reaper = r
	if d.pollCancel != nil {
		d.pollCancel() // a Poll under way returns; the poller then parks
	}
	return r, true
}

// Fd implements blockdev.Reaper: open until Release.
func (r *iserReaper) Fd() int { return r.fd }

// Reap implements blockdev.Reaper: it polls the CQ until empty (and
// armed) and runs each completion, as the poller would. false once the
// connection failed or is closing (or r was released).
func (r *iserReaper) Reap() bool {
	d := r.d
	// Looked at before reapMu too: Close holds it while the connection
	// drains (up to seconds), and the loop must not wait for that.
	if !r.live() {
		return false
	}
	d.reapMu.Lock()
	defer d.reapMu.Unlock()
	if !r.live() {
		return false
	}
	for {
		n, err := d.reapConn.TryPoll(r.wcs)
		if err != nil {
			d.fail(fmt.Errorf("iser: connection: %w", err))
			return false
		}
		if !d.completeAll(r.wcs[:n]) {
			return false
		}
		if n < len(r.wcs) {
			return true // emptied and armed: the descriptor says when more come
		}
	}
}

// live reports whether r still holds a connection that is not closing.
func (r *iserReaper) live() bool { return !r.ended.Load() }

// Release implements blockdev.Reaper: the poller takes the CQ back, and
// Fd is closed. After it returns revoked is not called any more.
// Idempotent.
func (r *iserReaper) Release() {
	if r.released {
		return
	}
	r.released = true
	d := r.d
	d.mu.Lock()
	r.ended.Store(true)
	if d.reaper == r {
		d.reaper = nil
		select {
		case d.unpark <- struct{}{}:
		default:
		}
	}
	d.mu.Unlock()
	_ = unix.Close(r.fd)
}

// revokeLocked tells the loop holding the CQ, if any, that the connection
// is going away (d.mu held: a Release cannot slip in between).
func (d *ISERDatamover) revokeLocked() {
	if d.reaper != nil {
		d.reaper.ended.Store(true)
		d.reaper.revoked()
	}
}

// completeAll runs a batch of completions; false when one of them failed
// the connection (which then is disconnecting).
func (d *ISERDatamover) completeAll(wcs []rdma.Completion) bool {
	ok := true
	for i := range wcs {
		if err := d.complete(&wcs[i]); err != nil {
			d.fail(err)
			_ = d.conn.Disconnect() // flushes what is outstanding
			ok = false
		}
	}
	// The receives this batch consumed are all posted again before the
	// CQ is waited on (complete queued them, iserRepostBatch at a time).
	if err := d.flushReposts(); err != nil && ok {
		d.fail(err)
		_ = d.conn.Disconnect()
		ok = false
	}
	return ok
}

// pollCtx returns the context the poller's next Poll runs under, or
// false when a loop reaps: the poller parks then. TakeReaper ends the
// context to get a Poll under way out of its wait.
func (d *ISERDatamover) pollCtx(base context.Context, ctx context.Context) (context.Context, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reaper != nil {
		return ctx, false
	}
	if ctx == nil || ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(base)
		d.pollCancel = cancel
	}
	return ctx, true
}
