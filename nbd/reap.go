package nbd

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/internal/rawwait"
)

// reaper lets a connection's writer reap the backend's completions itself
// (blockdev.Reaping) when the export's backend hands them over: the
// writer then waits in poll(2) on the backend's completion descriptor and
// on its own wake-up eventfd, runs the completions on its goroutine (their
// IODone queue the replies), and writes the replies, with no hand-off
// from the backend's completion goroutine to the writer. A kernel
// initiator completes the same way, in the handler that saw the
// completion.
//
// The writer must never stop reaping while it waits for the client: a
// completion left in the backend's queue would count against the
// command's timeout there. So a reply write that would block (the client
// is slow to take its replies) first gives the completion source back
// (writeNow), and the writer waits on the socket the usual way; it asks
// for the source again once it is idle.
//
// Everything but the wake-up fields belongs to the writer goroutine.
type reaper struct {
	src  blockdev.Reaping
	raw  syscall.RawConn // the socket, for writes that must not block
	held blockdev.Reaper // nil when the backend's goroutine completes
	efd  int             // the writer's wake-up eventfd; -1 until first held

	// Wake-up: queueReply and closeReplies write efd while the writer
	// sleeps in poll. queued counts replies queued and not yet taken, so
	// that a reply queued as the writer decides to sleep is seen.
	sleeping atomic.Bool
	queued   atomic.Int32
	revoked  atomic.Bool // the backend takes its source back
	onRevoke func()      // passed to Reaper, made once

	slot rawwait.Slot // poll raw while busy (rawwait)
	busy time.Time    // when a wait last ended with work
}

// newReaper returns a reaper for the connection's writer, or nil when the
// backend does not hand its completions over or the socket has no
// descriptor. Its eventfd is made when the writer first holds the source
// (an iSCSI/TCP session never hands it over).
func newReaper(b Backend, nc net.Conn) *reaper {
	src, ok := blockdev.As[blockdev.Reaping](b)
	if !ok {
		return nil
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &reaper{src: src, raw: raw, efd: -1}
	r.onRevoke = func() {
		r.revoked.Store(true)
		r.wake()
	}
	return r
}

// release gives the source and the raw-wait slot back; the writer calls
// it as it ends.
func (r *reaper) release() {
	r.drop()
	rawwait.Process.Give(&r.slot)
}

// close closes the eventfd. transmit calls it once the writer has ended and
// the reply queue is closed: nobody wakes the writer any more (closeReplies
// is the last, on transmit's goroutine; a revoke comes before Release).
func (r *reaper) close() {
	if r.efd >= 0 {
		unix.Close(r.efd)
		r.efd = -1
	}
}

// testWakeGap, when set by a test, runs in wake between seeing the writer
// asleep and writing the eventfd.
var testWakeGap func(efd int)

// wake ends the writer's poll, if it sleeps.
func (r *reaper) wake() {
	if r.sleeping.Load() {
		if testWakeGap != nil {
			testWakeGap(r.efd)
		}
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(r.efd, one[:])
	}
}

// take asks the backend for its completion source, when the writer holds
// none, and reaps once at once: completions may already wait.
func (r *reaper) take() bool {
	if r.held != nil {
		return true
	}
	r.revoked.Store(false)
	h, ok := r.src.Reaper(r.onRevoke)
	if !ok {
		return false
	}
	if r.efd < 0 {
		// On the first hold: wake reads efd only once the writer sleeps
		// in poll, which it does only while holding.
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			h.Release()
			return false
		}
		r.efd = efd
	}
	r.held = h
	if !h.Reap() {
		r.drop()
		return false
	}
	return true
}

// drop gives the source back to the backend's goroutine.
func (r *reaper) drop() {
	if r.held != nil {
		r.held.Release()
		r.held = nil
	}
}

// wait blocks until a reply may be queued, reaping the backend's
// completions while the writer holds them. It reports false when the
// writer holds no source: the caller then waits on the reply queue.
func (r *reaper) wait() bool {
	if !r.take() {
		rawwait.Process.Give(&r.slot) // the caller waits the usual way
		return false
	}
	if r.revoked.Load() {
		r.held.Reap() // reports the end
		r.drop()
		return true
	}
	r.sleeping.Store(true)
	if r.queued.Load() > 0 || r.revoked.Load() {
		r.sleeping.Store(false)
		return true
	}
	fds := [2]unix.PollFd{
		{Fd: int32(r.held.Fd()), Events: unix.POLLIN},
		{Fd: int32(r.efd), Events: unix.POLLIN},
	}
	if time.Since(r.busy) < rawwait.Idle {
		rawwait.Process.Take(&r.slot)
	} else {
		rawwait.Process.Give(&r.slot)
	}
	_, err := rawwait.Poll(&r.slot, fds[:])
	r.sleeping.Store(false)
	if err != nil {
		if errors.Is(err, unix.EINTR) {
			return true // a preemption, maybe: decide again how to wait
		}
		r.drop() // not expected: the backend's goroutine completes
		return true
	}
	r.busy = time.Now()
	if fds[1].Revents != 0 {
		var buf [8]byte
		_, _ = unix.Read(r.efd, buf[:])
	}
	if fds[0].Revents != 0 && !r.held.Reap() {
		r.drop()
	}
	return true
}

// writeNow writes what of p the socket takes without waiting. When that
// is not all of p, the writer is about to wait for the client, and it
// first gives the completion source back (see reaper).
func (r *reaper) writeNow(p []byte) int {
	if r.held == nil {
		return 0
	}
	n := 0
	err := r.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, err := unix.Write(int(fd), p[n:])
			if err == unix.EINTR {
				continue
			}
			if err != nil || m <= 0 {
				break
			}
			n += m
		}
		return true // never wait here
	})
	if err != nil || n < len(p) {
		r.drop() // the blocking write that follows reports any error
		rawwait.Process.Give(&r.slot)
	}
	return n
}
