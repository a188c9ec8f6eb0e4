package rawwait

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Raw waits are handed out while they leave the process a P: with
// GOMAXPROCS 3, two loops get one, a third waits the usual way until one
// of them gives its slot back; taking twice or giving twice counts once.
func TestSlotsLeaveOneP(t *testing.T) {
	var s Slots
	s.procs.Store(3)
	h := make([]Slot, 3)
	for i := range h {
		s.Take(&h[i])
		s.Take(&h[i])
	}
	if !h[0].Held() || !h[1].Held() || h[2].Held() || s.used.Load() != 2 {
		t.Fatalf("raw waits %v %v %v, %d used; want the first two", h[0].Held(), h[1].Held(), h[2].Held(), s.used.Load())
	}
	s.Give(&h[0])
	s.Give(&h[0])
	s.Take(&h[2])
	if h[0].Held() || !h[2].Held() || s.used.Load() != 2 {
		t.Fatalf("after a give: %v %v, %d used", h[0].Held(), h[2].Held(), s.used.Load())
	}
	var one Slots
	one.procs.Store(1)
	var x Slot
	if one.Take(&x); x.Held() {
		t.Fatal("GOMAXPROCS 1: a loop took the only P")
	}
}

// A raw poll keeps its P, yet with that P the only one other goroutines
// run (the monitor preempts the wait, which yields and returns EINTR),
// and a descriptor that becomes ready ends the wait.
func TestRawPollLeavesRuntimeRunning(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	h := Slot{held: true}
	got := make(chan int16, 1)
	interrupted := make(chan struct{}, 1)
	go func() {
		for {
			fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
			n, err := Poll(&h, fds)
			if err == unix.EINTR {
				select {
				case interrupted <- struct{}{}:
				default:
				}
				continue
			}
			if err != nil || n != 1 {
				t.Errorf("poll: %d, %v", n, err)
			}
			got <- fds[0].Revents
			return
		}
	}()
	time.Sleep(20 * time.Millisecond) // runs only once the wait was preempted
	select {
	case <-interrupted:
	case <-time.After(10 * time.Second):
		t.Fatal("the raw wait was never preempted")
	}
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(efd, one[:]); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r&unix.POLLIN == 0 {
		t.Fatalf("revents %#x", r)
	}
}
