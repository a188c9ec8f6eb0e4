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
//
// The budget is GOMAXPROCS-1, read on every Take: GOMAXPROCS changes at
// run time (the runtime follows the cgroup's CPU limit, a program may set
// it), and a change stops the world, which preempts every raw wait, so
// each loop holding a slot passes through Take again soon after. A loop
// that finds more slots held than the budget gives its own back there;
// slots beyond the budget are not handed out again until enough have
// been returned. With asynchronous preemption off (GODEBUG
// asyncpreemptoff=1) nothing can take a P back from a raw wait, not even
// a stop-the-world, so no raw wait is handed out at all.
type Slots struct {
	used atomic.Int32
}

// Process is the budget shared by every loop of the process.
var Process Slots

// Slot is one loop's claim on a raw wait; it belongs to the loop.
type Slot struct{ held bool }

// Held reports whether the loop may wait raw.
func (h *Slot) Held() bool { return h.held }

// budget is how many raw waits may be held now.
func budget() int32 {
	if preemptOff {
		return 0
	}
	return int32(runtime.GOMAXPROCS(0)) - 1
}

// Take gives h a slot when it has none and one is free. A loop that
// holds one keeps it while the budget allows, and gives it back when
// GOMAXPROCS has shrunk below the slots held.
func (s *Slots) Take(h *Slot) {
	max := budget()
	for {
		n := s.used.Load()
		if h.held {
			// Give back only while too many are held: of several loops
			// over the budget, as many keep theirs as it allows.
			if n <= max {
				return
			}
			if s.used.CompareAndSwap(n, n-1) {
				h.held = false
				return
			}
			continue
		}
		if n >= max {
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
