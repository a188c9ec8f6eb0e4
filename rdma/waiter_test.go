//go:build cgo

package rdma

import (
	"context"
	"runtime"
	"syscall"
	"testing"
)

// A wait leaves its context watched for the next wait; when that context
// ends after the waiter is closed (as a poller's or drain's deferred cancel
// does), the late wake-up must not write into whatever file took the
// eventfd's number.
func TestWaiterNoWakeAfterClose(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	hits := 0
	for range 200 {
		w, err := newWaiter()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w.wake()
		if _, err := w.wait(ctx); err != nil {
			t.Fatal(err)
		}
		evfd := w.evfd
		cancel()
		w.close()
		var p [2]int // a file opened now gets the eventfd's number back
		if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
		runtime.Gosched()
		var buf [16]byte
		if n, _ := syscall.Read(p[0], buf[:]); n > 0 && p[1] == evfd {
			hits++
		}
		syscall.Close(p[0])
		syscall.Close(p[1])
	}
	if hits > 0 {
		t.Fatalf("%d of 200 times a wake-up after close wrote into a pipe that took the eventfd's number", hits)
	}
}

// PollFd is the waiter's epoll descriptor while the connection is open and
// -1 once it is closed (a reaper asking late gets no reused number).
func TestPollFdAfterClose(t *testing.T) {
	w, err := newWaiter()
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{w: w}
	if c.PollFd() != -1 {
		t.Fatal("PollFd before the waiter is set up")
	}
	c.pollFd.Store(int32(w.epfd))
	if c.PollFd() != w.epfd {
		t.Fatalf("PollFd %d, want the waiter's %d", c.PollFd(), w.epfd)
	}
	_ = c.Close()
	if fd := c.PollFd(); fd != -1 {
		t.Fatalf("PollFd after Close: %d, want -1", fd)
	}
}
