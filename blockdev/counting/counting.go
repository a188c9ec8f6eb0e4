package counting

import (
	"context"
	"sync"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/metrics"
)

// Counters are a volume's I/O totals (the control socket's list and
// status answers carry them).
type Counters struct {
	Reads      uint64  `json:"reads"`
	Writes     uint64  `json:"writes"`
	ReadBytes  uint64  `json:"read_bytes"`
	WriteBytes uint64  `json:"write_bytes"`
	Flushes    uint64  `json:"flushes"`
	Discards   uint64  `json:"discards"`
	Zeroes     uint64  `json:"write_zeroes"`
	Errors     uint64  `json:"errors"`
	IOPS       float64 `json:"iops"` // over the last second
}

// Backend wraps a blockdev.Backend and counts what passes through in a
// metrics.IO: per op, completed I/Os, bytes (a discard's or write-zeroes'
// range counts as its bytes), errors and latency, with atomic adds only.
// It is safe for concurrent use. Close stops its IOPS sampler.
//
// It is a blockdev.Wrapper: a frontend finds the backend's Batcher,
// Reaping and BufferProvider through it with blockdev.As. It implements
// blockdev.Async itself, since it counts each request when it ends; the
// completions a frontend reaps (Reaping) end through it too.
type Backend struct {
	blockdev.Backend
	io    metrics.IO
	async blockdev.Async // the wrapped backend's own (blockdev.As), or nil

	mu       sync.Mutex
	lastOps  uint64
	lastTime time.Time
	iops     float64
	stop     chan struct{}
	once     sync.Once
	done     chan struct{}

	// OnError, when set before I/O starts, is told of every I/O that
	// fails (the frontend then sees an errno): op, offset, length, error.
	OnError func(op string, off int64, n int64, err error)
}

// New wraps b and starts the sampler.
func New(b blockdev.Backend) *Backend {
	c := &Backend{Backend: b, lastTime: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	c.async, _ = blockdev.As[blockdev.Async](b)
	go c.sample()
	return c
}

var (
	_ blockdev.Wrapper = (*Backend)(nil)
	_ blockdev.Async   = (*Backend)(nil)
)

// Unwrap implements blockdev.Wrapper: the counted backend.
func (c *Backend) Unwrap() blockdev.Backend { return c.Backend }

// IO is the counters, for a metrics.Collector.
func (c *Backend) IO() *metrics.IO { return &c.io }

// Snapshot reads the counters.
func (c *Backend) Snapshot() metrics.Snapshot { return c.io.Snapshot() }

func (c *Backend) sample() {
	defer close(c.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.tick(now)
		}
	}
}

// tick updates the IOPS over the last second. It allocates nothing: it
// runs while I/O does, and the fast path's guard counts every allocation
// the process makes.
func (c *Backend) tick(now time.Time) {
	ops := c.io.Completed()
	c.mu.Lock()
	if d := now.Sub(c.lastTime).Seconds(); d > 0 {
		c.iops = float64(ops-c.lastOps) / d
	}
	c.lastOps, c.lastTime = ops, now
	c.mu.Unlock()
}

// Close stops the sampler. Idempotent.
func (c *Backend) Close() error {
	c.once.Do(func() { close(c.stop); <-c.done })
	return nil
}

// Counters returns the totals of completed I/Os.
func (c *Backend) Counters() Counters {
	c.mu.Lock()
	iops := c.iops
	c.mu.Unlock()
	s := c.io.Snapshot()
	k := Counters{Reads: s.Op(metrics.OpRead).Count, Writes: s.Op(metrics.OpWrite).Count,
		ReadBytes: s.Op(metrics.OpRead).Bytes, WriteBytes: s.Op(metrics.OpWrite).Bytes,
		Flushes: s.Op(metrics.OpFlush).Count, Discards: s.Op(metrics.OpDiscard).Count,
		Zeroes: s.Op(metrics.OpWriteZeroes).Count, IOPS: iops}
	for _, st := range s.Ops {
		k.Errors += st.Errors
	}
	return k
}

// ReadAt reads from the backend and counts a read.
func (c *Backend) ReadAt(ctx context.Context, p []byte, off int64) error {
	start := c.io.Begin()
	err := c.Backend.ReadAt(ctx, p, off)
	c.io.End(metrics.OpRead, len(p), start, err)
	if err != nil && c.OnError != nil {
		c.OnError("read", off, int64(len(p)), err)
	}
	return err
}

// WriteAt writes to the backend and counts a write.
func (c *Backend) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	start := c.io.Begin()
	err := c.Backend.WriteAt(ctx, p, off, fua)
	c.io.End(metrics.OpWrite, len(p), start, err)
	if err != nil && c.OnError != nil {
		c.OnError("write", off, int64(len(p)), err)
	}
	return err
}

// Flush flushes the backend and counts a flush.
func (c *Backend) Flush(ctx context.Context) error {
	start := c.io.Begin()
	err := c.Backend.Flush(ctx)
	c.io.End(metrics.OpFlush, 0, start, err)
	if err != nil && c.OnError != nil {
		c.OnError("flush", 0, 0, err)
	}
	return err
}

// Trim discards a range of the backend and counts a discard.
func (c *Backend) Trim(ctx context.Context, off, length int64) error {
	start := c.io.Begin()
	err := c.Backend.Trim(ctx, off, length)
	c.io.End(metrics.OpDiscard, int(length), start, err)
	if err != nil && c.OnError != nil {
		c.OnError("discard", off, length, err)
	}
	return err
}

// WriteZeroes zeroes a range of the backend and counts a write-zeroes.
func (c *Backend) WriteZeroes(ctx context.Context, off, length int64, mayUnmap, fua bool) error {
	start := c.io.Begin()
	err := c.Backend.WriteZeroes(ctx, off, length, mayUnmap, fua)
	c.io.End(metrics.OpWriteZeroes, int(length), start, err)
	if err != nil && c.OnError != nil {
		c.OnError("write_zeroes", off, length, err)
	}
	return err
}
