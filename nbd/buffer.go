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

// budget bounds what one connection has in flight: request slots
// (Options.MaxInFlight) and payload bytes (Options.MaxInFlightBytes). The
// connection's reader is the only goroutine that acquires; the writer
// releases once a reply is on the wire. Because there is one acquirer, a
// single-slot wake channel is enough to avoid lost wake-ups.
type budget struct {
	mu    sync.Mutex
	slots int
	bytes int64
	wake  chan struct{}
}

func newBudget(slots int, bytes int64) *budget {
	return &budget{slots: slots, bytes: bytes, wake: make(chan struct{}, 1)}
}

// acquire takes one slot and n bytes, blocking until they are free or stop is
// closed. It reports whether it acquired.
func (b *budget) acquire(n int64, stop <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.slots > 0 && b.bytes >= n {
			b.slots--
			b.bytes -= n
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

// release returns one slot and n bytes.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.slots++
	b.bytes += n
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}
