package counting

import (
	"context"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/internal/freelist"
	"github.com/iser-attach/iser-attach/metrics"
)

// This file holds the counting Backend's asynchronous reads and writes:
// counted like the blocking ones, once, when they end.

// countedIO is a request in flight through a counting Backend's
// blockdev.Async, pooled.
type countedIO struct {
	c     *Backend
	op    metrics.Op
	n     int
	off   int64
	start time.Time
	done  blockdev.Done
}

var countedIOs freelist.List[countedIO]

// StartRead implements blockdev.Async: the backend's own when it has one,
// else its ReadAt on a goroutine.
func (c *Backend) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	a := c.async
	if a == nil {
		go func() {
			done.IODone(tag, blockdev.Split(p, off, int(c.MaxTransfer()), func(p []byte, off int64) error {
				return c.ReadAt(context.Background(), p, off)
			}))
		}()
		return
	}
	a.StartRead(p, off, c.begin(metrics.OpRead, len(p), off, done), tag)
}

// StartWrite implements blockdev.Async like StartRead.
func (c *Backend) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	a := c.async
	if a == nil {
		go func() {
			done.IODone(tag, blockdev.Split(p, off, int(c.MaxTransfer()), func(p []byte, off int64) error {
				return c.WriteAt(context.Background(), p, off, fua)
			}))
		}()
		return
	}
	a.StartWrite(p, off, fua, c.begin(metrics.OpWrite, len(p), off, done), tag)
}

func (c *Backend) begin(op metrics.Op, n int, off int64, done blockdev.Done) *countedIO {
	x := countedIOs.Get()
	x.c, x.op, x.n, x.off, x.done = c, op, n, off, done
	x.start = c.io.Begin()
	return x
}

// IODone implements blockdev.Done: it counts the request and passes its
// end on.
func (x *countedIO) IODone(tag uint32, err error) {
	c, op, n, off, done := x.c, x.op, x.n, x.off, x.done
	c.io.End(op, n, x.start, err)
	*x = countedIO{}
	countedIOs.Put(x)
	if err != nil && c.OnError != nil {
		name := "read"
		if op == metrics.OpWrite {
			name = "write"
		}
		c.OnError(name, off, int64(n), err)
	}
	done.IODone(tag, err)
}
