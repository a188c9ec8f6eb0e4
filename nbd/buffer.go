package nbd

import (
	"math/bits"
	"sync"
)

// Payload buffers come from power-of-two size classes, 4 KiB to 32 MiB, so a
// busy connection reuses them instead of allocating per request.
const (
	minBufShift = 12
	maxBufShift = 25 // 32 MiB = maxPayload
)

var bufPools [maxBufShift - minBufShift + 1]sync.Pool

func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

// getBuf returns a buffer of length n (n <= maxPayload) from the pool.
func getBuf(n int) *[]byte {
	c := bufClass(n)
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, 1<<(c+minBufShift))
	return &b
}

func putBuf(p *[]byte) {
	if p == nil {
		return
	}
	c := bufClass(cap(*p))
	if c < len(bufPools) && cap(*p) == 1<<(c+minBufShift) {
		bufPools[c].Put(p)
	}
}

// budget bounds the requests one connection has in flight
// (Options.MaxInFlight). The connection's reader is the only goroutine that
// acquires; the writer releases once a reply is on the wire. Because there is
// one acquirer, a single-slot wake channel is enough to avoid lost wake-ups.
type budget struct {
	mu    sync.Mutex
	slots int
	wake  chan struct{}
}

func newBudget(slots int) *budget {
	return &budget{slots: slots, wake: make(chan struct{}, 1)}
}

// acquire takes one slot, blocking until one is free or stop is closed. It
// reports whether it acquired.
func (b *budget) acquire(stop <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.slots > 0 {
			b.slots--
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-stop:
			return false
		}
	}
}

// tryAcquire takes one slot if one is free.
func (b *budget) tryAcquire() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slots > 0 {
		b.slots--
		return true
	}
	return false
}

// release returns one slot.
func (b *budget) release() {
	b.mu.Lock()
	b.slots++
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// byteBudget bounds the payload bytes a whole server holds
// (Options.MaxInFlightBytes): every connection's reader acquires before it
// allocates a payload buffer, and its writer releases once the reply is on
// the wire. Readers that must wait are served in arrival order, so a large
// request is not starved by a stream of small ones from other connections.
type byteBudget struct {
	mu    sync.Mutex
	limit int64
	held  int64
	peak  int64         // most bytes held at once
	queue []*byteWaiter // readers waiting, first come first served
}

// byteWaiter is one reader waiting in byteBudget.acquire.
type byteWaiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are granted
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit}
}

// acquire takes n bytes (n <= limit), blocking until they are granted or
// stop is closed. It reports whether it acquired.
func (b *byteBudget) acquire(n int64, stop <-chan struct{}) bool {
	if n == 0 {
		return true
	}
	b.mu.Lock()
	if len(b.queue) == 0 && b.held+n <= b.limit {
		b.take(n)
		b.mu.Unlock()
		return true
	}
	w := &byteWaiter{n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return true
	case <-stop:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give the bytes back
		b.held -= n
	default:
		for i, q := range b.queue {
			if q == w {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	b.grant() // the next in line may fit now
	return false
}

// tryAcquire takes n bytes if they are free and nobody waits.
func (b *byteBudget) tryAcquire(n int64) bool {
	if n == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 && b.held+n <= b.limit {
		b.take(n)
		return true
	}
	return false
}

// release returns n bytes and grants waiting readers what now fits.
func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	b.grant()
}

// grant serves the queue in order while its head fits. Called with mu held.
func (b *byteBudget) grant() {
	for len(b.queue) > 0 && b.held+b.queue[0].n <= b.limit {
		w := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.take(w.n)
		close(w.ready)
	}
}

// take adds n to the held bytes. Called with mu held.
func (b *byteBudget) take(n int64) {
	b.held += n
	b.peak = max(b.peak, b.held)
}

// byteStats is a snapshot of a byteBudget, for tests and logs.
type byteStats struct {
	held, peak int64
	waiting    int
}

func (b *byteBudget) stats() byteStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return byteStats{held: b.held, peak: b.peak, waiting: len(b.queue)}
}
