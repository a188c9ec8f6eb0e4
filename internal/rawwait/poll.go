package rawwait

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Poll waits without a timeout for one of fds, as poll(2): raw when h
// holds a slot. A raw wait interrupted by a signal (a preemption) yields
// and returns EINTR, so that the caller decides again how to wait.
func Poll(h *Slot, fds []unix.PollFd) (int, error) {
	if !h.held {
		return unix.Poll(fds, -1)
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0, 0, 0, 0)
	if errno != 0 {
		if errno == unix.EINTR {
			runtime.Gosched() // the preemption the signal asked for
		}
		return 0, errno
	}
	return int(n), nil
}
