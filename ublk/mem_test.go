package ublk

import (
	"context"
	"sync"
	"syscall"

	"github.com/iser-attach/iser-attach/blockdev"
)

// memBackend is an in-memory Backend for unit and lab tests; it records
// what reached it and fails requests that touch failFrom..failTo.
type memBackend struct {
	mu               sync.Mutex
	data             []byte
	bs               uint32
	maxXfer          uint32
	ro, trim, zeroes bool
	failFrom, failTo int64
	failErr          error

	flushes, trims, zeroCalls, fuaWrites, writes, reads int
	lastTrim, lastZero                                  [2]int64
	lastMayUnmap                                        bool
}

func newMemBackend(size int64, bs uint32) *memBackend {
	return &memBackend{data: make([]byte, size), bs: bs, trim: true, zeroes: true, failErr: syscall.EIO}
}

func (m *memBackend) Size() int64                { return int64(len(m.data)) }
func (m *memBackend) BlockSize() uint32          { return m.bs }
func (m *memBackend) PreferredBlockSize() uint32 { return 4096 }
func (m *memBackend) MaxTransfer() uint32        { return m.maxXfer }
func (m *memBackend) ReadOnly() bool             { return m.ro }
func (m *memBackend) CanTrim() bool              { return m.trim }
func (m *memBackend) CanWriteZeroes() bool       { return m.zeroes }

func (m *memBackend) failing(off, n int64) bool {
	return m.failTo > m.failFrom && off < m.failTo && off+n > m.failFrom
}

func (m *memBackend) ReadAt(_ context.Context, p []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.failing(off, int64(len(p))) {
		return m.failErr
	}
	copy(p, m.data[off:])
	return nil
}

func (m *memBackend) WriteAt(_ context.Context, p []byte, off int64, fua bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	if fua {
		m.fuaWrites++
	}
	if m.failing(off, int64(len(p))) {
		return m.failErr
	}
	copy(m.data[off:], p)
	return nil
}

func (m *memBackend) Flush(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushes++
	return nil
}

func (m *memBackend) Trim(_ context.Context, off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trims++
	m.lastTrim = [2]int64{off, n}
	clear(m.data[off : off+n])
	return nil
}

func (m *memBackend) WriteZeroes(_ context.Context, off, n int64, mayUnmap, fua bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.zeroCalls++
	m.lastZero = [2]int64{off, n}
	m.lastMayUnmap = mayUnmap
	clear(m.data[off : off+n])
	return nil
}

// asyncMem is a memBackend with blockdev.Async: requests are served, in
// order, by one completion goroutine, as a LUN's come back from its
// datamover's poller.
type asyncMem struct {
	*memBackend
	work chan func()
	out  chan struct{}
}

func newAsyncMem(m *memBackend) *asyncMem {
	a := &asyncMem{memBackend: m, work: make(chan func(), 1024), out: make(chan struct{})}
	go func() {
		defer close(a.out)
		for f := range a.work {
			f()
		}
	}()
	return a
}

func (a *asyncMem) close() { close(a.work); <-a.out }

func (a *asyncMem) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	a.work <- func() { done.IODone(tag, a.ReadAt(context.Background(), p, off)) }
}

func (a *asyncMem) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	a.work <- func() { done.IODone(tag, a.WriteAt(context.Background(), p, off, fua)) }
}
