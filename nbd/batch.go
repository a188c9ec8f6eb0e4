package nbd

// The reader starts the reads and writes that one socket read brought in
// one batch (blockdev.Batcher): the backend posts them together when the
// batch ends, one doorbell for all (on soft-RoCE, one system call instead
// of one per request). A batch holds the backend's posts back, so the
// reader ends it before anything that may wait: a read the buffer cannot
// satisfy (the next header, a payload), a full request or byte budget,
// and its own end.

import "github.com/iser-attach/iser-attach/blockdev"

// beginBatch opens a batch for the request being started, unless one is
// open.
func (c *conn) beginBatch() {
	if c.batcher != nil && !c.batched {
		c.batch = c.batcher.BeginBatch()
		c.batched = true
	}
}

// endBatch posts what the open batch holds.
func (c *conn) endBatch() {
	if c.batched {
		c.batched = false
		c.batcher.EndBatch(c.batch)
		c.batch = blockdev.Batch{}
	}
}
