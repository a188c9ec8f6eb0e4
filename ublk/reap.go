package ublk

import (
	"sync/atomic"

	"github.com/iser-attach/iser-attach/blockdev"
)

// This file holds a queue loop's hold on its backend's completion source
// (blockdev.Reaping): the loop polls the source's descriptor in its own
// ring and reaps the completions on its thread, so that one wake-up of
// the loop serves a request's end instead of the backend's completion
// goroutine waking and then writing the loop's eventfd.

// user_data of the loop's own SQEs; I/O commands carry their tag, below
// 1<<16.
const (
	pollTag   = 1 << 32 // the eventfd poll
	reapTag   = 2 << 32 // the reaper's poll; the low 32 bits are its generation
	removeTag = 3 << 32 // a POLL_REMOVE's own completion
	kindMask  = uint64(0xffffffff) << 32
)

// reapState is owned by the queue loop, but for revoked.
type reapState struct {
	src   blockdev.Reaping // the backend's, or nil
	rp    blockdev.Reaper  // held, or nil
	gen   uint32           // the generation of rp's poll
	armed bool             // rp's POLL_ADD is in the ring, not yet completed
	// revoked is set by the source (any goroutine) when rp is going away;
	// the eventfd wake-up that follows makes the loop drop it.
	revoked atomic.Bool
	wake    func() // the loop's eventfd
}

// revoke is the source's revoked callback.
func (rs *reapState) revoke() {
	rs.revoked.Store(true)
	rs.wake()
}

// take asks the source for its completions when the loop holds none and
// polls the descriptor; true when it took a reaper (the loop then reaps
// once at once: what came before the hand-over may not wake the poll).
func (rs *reapState) take(r *ring) bool {
	if rs.src == nil || rs.rp != nil {
		return false
	}
	rs.revoked.Store(false)
	rp, ok := rs.src.Reaper(rs.revoke)
	if !ok {
		return false
	}
	rs.rp = rp
	rs.gen++
	rs.arm(r)
	return true
}

// arm polls rp's descriptor (one-shot).
func (rs *reapState) arm(r *ring) {
	prepPollAdd(r.sqeSubmitting(), rs.rp.Fd(), reapTag|uint64(rs.gen))
	rs.armed = true
}

// fired reports whether a reaper-poll completion is rp's current one (a
// removed or stale poll's is not); it is then no longer armed.
func (rs *reapState) fired(userData uint64) bool {
	if rs.rp == nil || uint32(userData) != rs.gen {
		return false
	}
	rs.armed = false
	return true
}

// drop gives rp back: its poll, if still armed, is removed first (the
// ring would otherwise keep the descriptor's file open until it closes),
// and what is prepared is submitted before Release closes the
// descriptor, so that an armed POLL_ADD still in the SQ never reaches
// the kernel with a closed (or reused) descriptor number.
func (rs *reapState) drop(r *ring) {
	if rs.rp == nil {
		return
	}
	if rs.armed {
		prepPollRemove(r.sqeSubmitting(), reapTag|uint64(rs.gen), removeTag)
		rs.armed = false
		_ = r.enter(0, 0) // submit only; a failure ends the loop anyway
	}
	rs.letGo()
}

// letGo releases rp without touching the ring: as the loop ends, closing
// the ring cancels the poll, and what is left in the SQ is never
// submitted.
func (rs *reapState) letGo() {
	if rs.rp != nil {
		rs.rp.Release()
		rs.rp = nil
	}
	rs.armed = false
}
