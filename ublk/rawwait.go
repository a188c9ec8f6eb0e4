package ublk

import (
	"runtime"
	"sync/atomic"
)

// rawWaitSlots lets queue loops wait in raw system calls (ring.rawWait),
// keeping their P, as long as that leaves the rest of the process at
// least one: every loop holding a P while it waits would leave the other
// goroutines (a device being recovered, the backend's, control traffic)
// to run only when the scheduler's monitor preempts a loop, every 10 ms.
// A loop asks for a slot on every pass until it has one, and gives it
// back when it stops.
type rawWaitSlots struct {
	used  atomic.Int32
	procs atomic.Int32 // GOMAXPROCS, read once
}

var rawWaits rawWaitSlots

// take gives r a slot when it has none and one is free.
func (s *rawWaitSlots) take(r *ring) {
	if r.rawWait {
		return
	}
	procs := s.procs.Load()
	if procs == 0 {
		procs = int32(runtime.GOMAXPROCS(0))
		s.procs.Store(procs)
	}
	for {
		n := s.used.Load()
		if n+1 >= procs {
			return
		}
		if s.used.CompareAndSwap(n, n+1) {
			r.rawWait = true
			return
		}
	}
}

// give takes r's slot back, if it has one.
func (s *rawWaitSlots) give(r *ring) {
	if r.rawWait {
		r.rawWait = false
		s.used.Add(-1)
	}
}
