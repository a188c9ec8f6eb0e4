package rawwait

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Idle is how long a loop keeps waiting raw after its last piece of work:
// past it, the monitor's preemptions every 10 ms (each a round of thread
// hand-offs) cost more than the first wake-up made the usual way.
const Idle = 20 * time.Millisecond

// Slots hands out raw waits while they leave the process a P: every loop
// holding a P while it waits would leave the other goroutines (a device
// being recovered, the backend's, control traffic) to run only when the
// monitor preempts a loop, every 10 ms.
type Slots struct {
	used  atomic.Int32
	procs atomic.Int32 // GOMAXPROCS, read once
}

// Process is the budget shared by every loop of the process.
var Process Slots

// Slot is one loop's claim on a raw wait; it belongs to the loop.
type Slot struct{ held bool }

// Held reports whether the loop may wait raw.
func (h *Slot) Held() bool { return h.held }

// Take gives h a slot when it has none and one is free.
func (s *Slots) Take(h *Slot) {
	if h.held {
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
			h.held = true
			return
		}
	}
}

// Give takes h's slot back, if it has one.
func (s *Slots) Give(h *Slot) {
	if h.held {
		h.held = false
		s.used.Add(-1)
	}
}
