//go:build cgo

package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// Tags of the file descriptors a waiter watches.
const (
	tagWake uint32 = 1 << iota // the waiter's own eventfd
	tagCM                      // an RDMA CM event channel
	tagComp                    // a completion channel
)

// waiter blocks on an epoll set of non-blocking file descriptors plus an
// eventfd that wake (called by Close or by a context's cancellation) makes
// readable. One goroutine at a time may call wait; wake and close are safe
// from any goroutine, close only after wait has returned for good.
type waiter struct {
	epfd, evfd int
	// watched is the context whose end wakes wait (through unwatch's
	// AfterFunc), kept from one wait to the next: a poller waits with the
	// same context every time, and registering it once saves an
	// allocation per wait. Guarded by the caller (Conn.pollMu).
	watched context.Context
	unwatch func() bool
	// wakeMu orders wake (which the watched context's AfterFunc may run
	// on a goroutine of its own, late) against close: a wake after close
	// writes nothing, not even into a descriptor that took evfd's number.
	wakeMu sync.Mutex
	closed bool
}

func newWaiter() (*waiter, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	const efdCloexec, efdNonblock = 0x80000, 0x800
	evfd, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, efdCloexec|efdNonblock, 0)
	if e != 0 {
		syscall.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", e)
	}
	w := &waiter{epfd: epfd, evfd: int(evfd)}
	if err := w.add(w.evfd, tagWake); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// add watches fd for readability, reported as tag.
func (w *waiter) add(fd int, tag uint32) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(tag)}
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add fd %d: %w", fd, err)
	}
	return nil
}

// wake makes a pending or the next wait return.
func (w *waiter) wake() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	w.wakeMu.Lock()
	defer w.wakeMu.Unlock()
	if !w.closed {
		syscall.Write(w.evfd, one[:])
	}
}

// wait blocks until a watched descriptor is readable, wake is called, or ctx
// is done, and returns the tags that are ready. The caller rechecks its own
// state (closed, ctx.Err()) after every return.
func (w *waiter) wait(ctx context.Context) (uint32, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if ctx != w.watched {
		if w.unwatch != nil {
			w.unwatch()
		}
		w.watched, w.unwatch = ctx, context.AfterFunc(ctx, w.wake)
	}
	return w.epoll(-1)
}

// ready returns the tags of what is ready now, without waiting; a wake
// among them is taken back.
func (w *waiter) ready() (uint32, error) { return w.epoll(0) }

// epoll waits up to msec milliseconds (-1: until something is ready) and
// returns the tags of what is ready, taking a wake among them back.
func (w *waiter) epoll(msec int) (uint32, error) {
	var evs [4]syscall.EpollEvent
	for {
		n, err := syscall.EpollWait(w.epfd, evs[:], msec)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("epoll_wait: %w", err)
		}
		var tags uint32
		for _, ev := range evs[:n] {
			tags |= uint32(ev.Fd)
		}
		if tags&tagWake != 0 {
			var buf [8]byte
			syscall.Read(w.evfd, buf[:])
		}
		return tags, nil
	}
}

func (w *waiter) close() {
	if w.unwatch != nil {
		w.unwatch()
	}
	w.wakeMu.Lock()
	w.closed = true
	w.wakeMu.Unlock()
	syscall.Close(w.evfd)
	syscall.Close(w.epfd)
}
