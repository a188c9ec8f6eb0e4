// Package freelist holds objects for reuse on an I/O path: a stack that,
// unlike sync.Pool, the garbage collector never empties, so that a path
// that reuses its request state allocates nothing after warm-up, not even
// after a collection.
package freelist

import "sync"

// List is a stack of *T ready for reuse; the zero value is empty. It is
// safe for concurrent use.
type List[T any] struct {
	mu    sync.Mutex
	items []*T
}

// Get returns a reused *T, or a new zero one.
func (l *List[T]) Get() *T {
	l.mu.Lock()
	if n := len(l.items); n > 0 {
		x := l.items[n-1]
		l.items[n-1] = nil
		l.items = l.items[:n-1]
		l.mu.Unlock()
		return x
	}
	l.mu.Unlock()
	return new(T)
}

// Put keeps x for a later Get; the caller has cleared what x must not
// hold on to.
func (l *List[T]) Put(x *T) {
	l.mu.Lock()
	l.items = append(l.items, x)
	l.mu.Unlock()
}
