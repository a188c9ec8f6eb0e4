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
// the wire. Several readers may wait at once; a release wakes them all
// through a channel that it closes and replaces.
type byteBudget struct {
	mu      sync.Mutex
	limit   int64
	held    int64
	peak    int64         // most bytes held at once
	waiting int           // readers blocked in acquire
	changed chan struct{} // closed by a release while readers wait
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit, changed: make(chan struct{})}
}

// acquire takes n bytes (n <= limit), blocking until they are free or stop
// is closed. It reports whether it acquired.
func (b *byteBudget) acquire(n int64, stop <-chan struct{}) bool {
	if n == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.held+n > b.limit {
		ch := b.changed
		b.waiting++
		b.mu.Unlock()
		var stopped bool
		select {
		case <-ch:
		case <-stop:
			stopped = true
		}
		b.mu.Lock()
		b.waiting--
		if stopped {
			return false
		}
	}
	b.held += n
	b.peak = max(b.peak, b.held)
	return true
}

// release returns n bytes.
func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	if b.waiting > 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// byteStats is a snapshot of a byteBudget, for tests and logs.
type byteStats struct {
	held, peak int64
	waiting    int
}

func (b *byteBudget) stats() byteStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return byteStats{held: b.held, peak: b.peak, waiting: b.waiting}
}
