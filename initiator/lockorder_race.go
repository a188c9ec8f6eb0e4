//go:build race

package initiator

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// This file checks the lock order (lockorder.go) in builds with the race
// detector. Go gives a goroutine no identity, so the check reads it from
// runtime.Stack's header ("goroutine 42 [running]:"), as debugging tools
// do: slow (a microsecond or so per Lock), which is why it is in race
// builds only. It records, per goroutine, the ranked mutexes held, and
// panics when a goroutine asks for one while it holds one of the same or a
// later rank: before it blocks, so an inversion that would deadlock one
// day panics in the test that takes it. A mutex unlocked by another
// goroutine than the one that locked it (allowed by sync.Mutex) is found
// and dropped from the locker's set.

// lockOrderChecks is true where the lock order is checked.
const lockOrderChecks = true

type heldLock struct {
	m    unsafe.Pointer
	rank lockRank
}

// lockOrder is the checker's state, under its mu. Nothing here allocates
// once warm (the zero-allocation tests run with -race too): the stack
// buffer is this one, and a goroutine's emptied list goes to spare for
// the next.
var lockOrder struct {
	mu    sync.Mutex
	held  map[uint64][]heldLock // by goroutine, in the order taken
	spare [][]heldLock
	buf   [64]byte
}

// Lock checks the order, then locks.
func (m *rankedMutex[R]) Lock() {
	var r R
	g := checkLockOrder(r.rank())
	m.Mutex.Lock()
	addHeld(g, unsafe.Pointer(m), r.rank())
}

// TryLock records the mutex when it got it. It cannot deadlock, so it is
// not checked.
func (m *rankedMutex[R]) TryLock() bool {
	if !m.Mutex.TryLock() {
		return false
	}
	var r R
	lockOrder.mu.Lock()
	g := goidLocked()
	lockOrder.mu.Unlock()
	addHeld(g, unsafe.Pointer(m), r.rank())
	return true
}

// Unlock forgets the mutex, then unlocks.
func (m *rankedMutex[R]) Unlock() {
	dropHeld(unsafe.Pointer(m))
	m.Mutex.Unlock()
}

// checkLockOrder panics when the calling goroutine holds a lock of rank r
// or later; it returns the goroutine's number.
func checkLockOrder(r lockRank) uint64 {
	lockOrder.mu.Lock()
	g := goidLocked()
	var bad lockRank
	for _, h := range lockOrder.held[g] {
		if h.rank >= r {
			bad = h.rank
			break
		}
	}
	lockOrder.mu.Unlock()
	if bad != 0 {
		panic(fmt.Sprintf("lock order: goroutine %d takes the %s (rank %d) while it holds the %s (rank %d)",
			g, r, r, bad, bad))
	}
	return g
}

func addHeld(g uint64, m unsafe.Pointer, r lockRank) {
	lockOrder.mu.Lock()
	if lockOrder.held == nil {
		lockOrder.held = make(map[uint64][]heldLock)
	}
	hs, ok := lockOrder.held[g]
	if !ok && len(lockOrder.spare) > 0 {
		hs = lockOrder.spare[len(lockOrder.spare)-1]
		lockOrder.spare = lockOrder.spare[:len(lockOrder.spare)-1]
	}
	lockOrder.held[g] = append(hs, heldLock{m, r})
	lockOrder.mu.Unlock()
}

// dropHeld forgets m: held by the calling goroutine, or by whichever
// goroutine locked it.
func dropHeld(m unsafe.Pointer) {
	lockOrder.mu.Lock()
	defer lockOrder.mu.Unlock()
	if dropFrom(goidLocked(), m) {
		return
	}
	for other := range lockOrder.held {
		if dropFrom(other, m) {
			return
		}
	}
}

func dropFrom(g uint64, m unsafe.Pointer) bool {
	hs := lockOrder.held[g]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].m == m {
			hs = append(hs[:i], hs[i+1:]...)
			if len(hs) == 0 {
				delete(lockOrder.held, g)
				lockOrder.spare = append(lockOrder.spare, hs)
			} else {
				lockOrder.held[g] = hs
			}
			return true
		}
	}
	return false
}

// goidLocked is the calling goroutine's number, from its stack trace's
// header. Under lockOrder.mu (its buffer).
func goidLocked() uint64 {
	b := lockOrder.buf[:runtime.Stack(lockOrder.buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		panic("lock order: no goroutine header in runtime.Stack: " + string(b))
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
