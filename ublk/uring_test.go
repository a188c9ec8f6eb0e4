package ublk

import (
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The host kernel has io_uring: NOPs go round trip through a real ring, with
// 64- and 128-byte SQEs.
func TestRingNop(t *testing.T) {
	for _, sqe128 := range []bool{false, true} {
		r, err := newRing(8, sqe128)
		if err != nil {
			t.Fatalf("newRing(sqe128=%v): %v", sqe128, err)
		}
		if want := map[bool]int{false: 64, true: 128}[sqe128]; r.sqeSize != want {
			t.Errorf("sqe size %d, want %d", r.sqeSize, want)
		}
		for round := 0; round < 3; round++ { // wraps the 8-entry ring
			for i := 0; i < 5; i++ {
				sqe := r.sqe()
				if sqe == nil {
					t.Fatalf("round %d: no SQE for %d", round, i)
				}
				prepNop(sqe, uint64(round*100+i))
			}
			if err := r.enter(5, 0); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				e, ok := r.peek()
				if !ok {
					t.Fatalf("round %d: %d completions, want 5", round, i)
				}
				r.advance()
				if e.UserData != uint64(round*100+i) || e.Res != 0 {
					t.Errorf("cqe %+v, want user_data %d res 0", e, round*100+i)
				}
			}
			if _, ok := r.peek(); ok {
				t.Fatal("extra completion")
			}
		}
		if err := r.close(); err != nil {
			t.Fatal(err)
		}
		if err := r.close(); err != nil { // idempotent
			t.Fatal(err)
		}
	}
}

func TestRingFull(t *testing.T) {
	r, err := newRing(4, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	for i := 0; i < 4; i++ {
		if r.sqe() == nil {
			t.Fatalf("SQE %d missing", i)
		}
	}
	if r.sqe() != nil {
		t.Fatal("a fifth SQE in a 4-entry ring")
	}
}

// A wait with a timeout returns when nothing completes.
func TestRingWaitTimeout(t *testing.T) {
	r, err := newRing(4, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if r.features&featExtArg == 0 {
		t.Fatal("kernel without IORING_FEAT_EXT_ARG (5.11)")
	}
	t0 := time.Now()
	if err := r.enter(1, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 40*time.Millisecond || d > 2*time.Second {
		t.Fatalf("waited %v for a 50 ms timeout", d)
	}
}

func TestRingSetupFailure(t *testing.T) {
	for _, n := range []uint32{0, 65536} {
		_, err := newRing(n, false)
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("newRing(%d) = %v, want EINVAL", n, err)
		}
	}
}

// sqeSubmitting hands out an SQE even when the SQ is full, by submitting
// what is prepared first.
func TestRingSQESubmitting(t *testing.T) {
	r, err := newRing(4, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	for i := range 4 {
		prepNop(r.sqe(), uint64(i))
	}
	if r.sqe() != nil {
		t.Fatal("a full SQ gave an SQE")
	}
	s := r.sqeSubmitting()
	if s == nil {
		t.Fatal("sqeSubmitting found no SQE after submitting")
	}
	prepNop(s, 4)
	if err := r.enter(5, 0); err != nil {
		t.Fatal(err)
	}
	if r.ready() != 5 {
		t.Fatalf("%d completions, want 5", r.ready())
	}
}

// rawWaitRing returns a ring that waits raw, with a poll (user data 7)
// armed on the returned eventfd; both are closed when t ends.
func rawWaitRing(t *testing.T) (*ring, int) {
	r, err := newRing(4, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close() })
	r.rawWait = true
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	prepPollAdd(r.sqe(), efd, 7)
	if err := r.enter(0, 0); err != nil {
		t.Fatal(err)
	}
	return r, efd
}

// A loop waiting in a raw io_uring_enter keeps its P, but the runtime
// still gets it back when it needs it: with that P the only one, a
// garbage collection (a stop-the-world) and other goroutines still run
// while the loop waits, and the loop still sees its completion.
func TestRingRawWaitLeavesRuntimeRunning(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r, efd := rawWaitRing(t)
	got := make(chan cqe, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for r.ready() == 0 { // a preemption returns early (see below)
			if err := r.enter(1, 0); err != nil {
				t.Error(err)
			}
		}
		e, _ := r.peek()
		got <- e
	}()
	time.Sleep(20 * time.Millisecond) // the loop waits by now
	runtime.GC()
	pong := make(chan int)
	go func() { pong <- 1 }()
	<-pong
	select {
	case e := <-got:
		t.Fatalf("the wait ended early: %+v", e)
	default:
	}
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(efd, one[:]); err != nil {
		t.Fatal(err)
	}
	if e := <-got; e.UserData != 7 {
		t.Fatalf("completion %+v, want the eventfd poll's", e)
	}
}

// A raw wait returns to its caller after a preemption, with nothing
// completed, so that a loop gone idle can stop waiting raw (the monitor
// would otherwise preempt it every 10 ms for as long as it waits).
func TestRingRawWaitReturnsOnPreemption(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r, efd := rawWaitRing(t) // the poll never fires
	returned := make(chan uint32, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := r.enter(1, 0)
		if err != nil {
			t.Error(err)
		}
		returned <- r.ready()
	}()
	// With the only P held by the waiting loop, this goroutine runs again
	// only once the monitor has preempted the loop.
	time.Sleep(20 * time.Millisecond)
	runtime.GC()
	select {
	case n := <-returned:
		if n != 0 {
			t.Fatalf("%d completions ready, want none", n)
		}
	case <-time.After(10 * time.Second):
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(efd, one[:]) // let the waiter go
		<-returned
		t.Fatal("the raw wait went on waiting after a preemption")
	}
}

// A ring with IORING_SETUP_SINGLE_ISSUER and DEFER_TASKRUN (the queue
// loops'): set up with them on this kernel (6.1+), NOPs complete when the
// thread that made it waits for them.
func TestRingDeferTaskrun(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := newRingFlags(8, false, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if r.flags&(setupSingleIssuer|setupDeferTaskrun) != setupSingleIssuer|setupDeferTaskrun {
		t.Fatalf("setup flags %#x: no SINGLE_ISSUER|DEFER_TASKRUN", r.flags)
	}
	for i := 0; i < 3; i++ {
		prepNop(r.sqe(), uint64(i))
	}
	if err := r.enter(3, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		e, ok := r.peek()
		if !ok || e.UserData != uint64(i) {
			t.Fatalf("completion %d: %+v %v", i, e, ok)
		}
		r.advance()
	}
}
