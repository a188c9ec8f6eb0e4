package rawwait

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Raw waits are handed out while they leave the process a P: with
// GOMAXPROCS 3, two loops get one, a third waits the usual way until one
// of them gives its slot back; taking twice or giving twice counts once.
func TestSlotsLeaveOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	var s Slots
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
	runtime.GOMAXPROCS(1)
	var one Slots
	var x Slot
	if one.Take(&x); x.Held() {
		t.Fatal("GOMAXPROCS 1: a loop took the only P")
	}
}

// The budget follows GOMAXPROCS as it changes at run time: computed for
// 4, it shrinks at 2 and 1. Slots held beyond it are not handed out again
// until enough are returned, and a loop that holds one over the budget
// gives it back at its next take; growing again hands them out again.
func TestSlotsFollowGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	var s Slots
	h := make([]Slot, 4)
	for i := range h {
		s.Take(&h[i])
	}
	held := func() (n int) {
		for i := range h {
			if h[i].Held() {
				n++
			}
		}
		if int32(n) != s.used.Load() {
			t.Fatalf("%d slots held, %d counted", n, s.used.Load())
		}
		return n
	}
	if n := held(); n != 3 || h[3].Held() {
		t.Fatalf("GOMAXPROCS 4: %d raw waits, want 3 (the first three)", n)
	}

	runtime.GOMAXPROCS(2) // a budget of 1, 3 held
	s.Give(&h[0])
	if s.Take(&h[3]); h[3].Held() {
		t.Fatal("GOMAXPROCS 2: a slot beyond the budget was handed out again")
	}
	s.Take(&h[1]) // over the budget: gives its own back
	s.Take(&h[2]) // within it now: keeps it
	if n := held(); n != 1 || !h[2].Held() {
		t.Fatalf("GOMAXPROCS 2: %d raw waits held after every loop's take, want 1", n)
	}
	s.Take(&h[2])
	if !h[2].Held() {
		t.Fatal("GOMAXPROCS 2: the one raw wait the budget allows was taken back")
	}

	runtime.GOMAXPROCS(1) // no raw wait: it would hold the only P
	s.Take(&h[2])
	s.Take(&h[0])
	if n := held(); n != 0 {
		t.Fatalf("GOMAXPROCS 1: %d raw waits held", n)
	}

	runtime.GOMAXPROCS(4)
	for i := range h {
		s.Take(&h[i])
	}
	if n := held(); n != 3 {
		t.Fatalf("GOMAXPROCS 4 again: %d raw waits, want 3", n)
	}
}

// Holders over the budget taking at once give back only the excess.
func TestSlotsShrinkConcurrently(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	var s Slots
	h := make([]Slot, 7)
	for i := range h {
		s.Take(&h[i])
	}
	if s.used.Load() != 7 {
		t.Fatalf("%d raw waits, want 7", s.used.Load())
	}
	runtime.GOMAXPROCS(3)
	var wg sync.WaitGroup
	for i := range h {
		wg.Go(func() {
			for range 100 {
				s.Take(&h[i])
			}
		})
	}
	wg.Wait()
	if n := s.used.Load(); n != 2 {
		t.Fatalf("GOMAXPROCS 3: %d raw waits held, want 2", n)
	}
}

// With asynchronous preemption off (GODEBUG asyncpreemptoff=1), nothing
// can take the P back from a raw wait, not even a stop-the-world: no raw
// wait is handed out, and a loop's wait is an ordinary poll, during which
// a GC runs. The test runs itself in a child process with the setting;
// a child whose loop waits raw hangs in runtime.GC until killed.
func TestNoRawWaitWithoutAsyncPreemption(t *testing.T) {
	if os.Getenv("RAWWAIT_TEST_CHILD") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNoRawWaitWithoutAsyncPreemption$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "RAWWAIT_TEST_CHILD=1", "GODEBUG=gctrace=0,asyncpreemptoff=0,asyncpreemptoff=1")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("the child hung (a raw wait held a P a stop-the-world could not take back):\n%s", out)
		}
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestNoRawWaitWithoutAsyncPreemption") {
			t.Fatalf("the child ran no test:\n%s", out)
		}
		return
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	var s Slots
	var h Slot
	if s.Take(&h); h.Held() {
		t.Error("asyncpreemptoff=1: a raw wait was handed out")
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	polling := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
		close(polling)
		for {
			_, err := Poll(&h, fds)
			if err != unix.EINTR {
				done <- err
				return
			}
		}
	}()
	<-polling
	time.Sleep(20 * time.Millisecond) // in the poll by now
	runtime.GC()                      // a stop-the-world
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(efd, one[:]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("poll: %v", err)
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
