package volume

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iser-attach/iser-attach/nbd"
)

// Backend is the block backend a frontend serves (initiator.LUN): the
// same contract as an NBD export's.
type Backend = nbd.Backend

// Counters are a volume's I/O totals.
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

// Counting wraps a Backend and counts what passes through. It is safe for
// concurrent use. Close stops its IOPS sampler.
type Counting struct {
	Backend
	reads, writes, rbytes, wbytes, flushes, discards, zeroes, errs atomic.Uint64

	mu       sync.Mutex
	lastOps  uint64
	lastTime time.Time
	iops     float64
	stop     chan struct{}
	once     sync.Once
	done     chan struct{}
}

// NewCounting wraps b and starts the sampler.
func NewCounting(b Backend) *Counting {
	c := &Counting{Backend: b, lastTime: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go c.sample()
	return c
}

func (c *Counting) ops() uint64 {
	return c.reads.Load() + c.writes.Load() + c.flushes.Load() + c.discards.Load() + c.zeroes.Load()
}

func (c *Counting) sample() {
	defer close(c.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			ops := c.ops()
			c.mu.Lock()
			if d := now.Sub(c.lastTime).Seconds(); d > 0 {
				c.iops = float64(ops-c.lastOps) / d
			}
			c.lastOps, c.lastTime = ops, now
			c.mu.Unlock()
		}
	}
}

// Close stops the sampler. Idempotent.
func (c *Counting) Close() error {
	c.once.Do(func() { close(c.stop); <-c.done })
	return nil
}

// Counters returns the totals.
func (c *Counting) Counters() Counters {
	c.mu.Lock()
	iops := c.iops
	c.mu.Unlock()
	return Counters{Reads: c.reads.Load(), Writes: c.writes.Load(), ReadBytes: c.rbytes.Load(),
		WriteBytes: c.wbytes.Load(), Flushes: c.flushes.Load(), Discards: c.discards.Load(),
		Zeroes: c.zeroes.Load(), Errors: c.errs.Load(), IOPS: iops}
}

func (c *Counting) count(err error) error {
	if err != nil {
		c.errs.Add(1)
	}
	return err
}

func (c *Counting) ReadAt(ctx context.Context, p []byte, off int64) error {
	c.reads.Add(1)
	c.rbytes.Add(uint64(len(p)))
	return c.count(c.Backend.ReadAt(ctx, p, off))
}

func (c *Counting) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	c.writes.Add(1)
	c.wbytes.Add(uint64(len(p)))
	return c.count(c.Backend.WriteAt(ctx, p, off, fua))
}

func (c *Counting) Flush(ctx context.Context) error {
	c.flushes.Add(1)
	return c.count(c.Backend.Flush(ctx))
}

func (c *Counting) Trim(ctx context.Context, off, length int64) error {
	c.discards.Add(1)
	return c.count(c.Backend.Trim(ctx, off, length))
}

func (c *Counting) WriteZeroes(ctx context.Context, off, length int64, mayUnmap, fua bool) error {
	c.zeroes.Add(1)
	return c.count(c.Backend.WriteZeroes(ctx, off, length, mayUnmap, fua))
}
