package nbdtest

import (
	"context"

	"github.com/iser-attach/iser-attach/blockdev"
)

// AsyncMemory is a Memory whose reads and writes also start through
// blockdev.Async, as an initiator.LUN's do: each runs on a goroutine of its
// own (hooks may hold it), split at MaxTransfer, and is reported to its
// Done. Its hooks get a context that is never cancelled.
type AsyncMemory struct{ *Memory }

var (
	_ blockdev.Backend = AsyncMemory{}
	_ blockdev.Async   = AsyncMemory{}
)

// Async returns m with blockdev.Async.
func (m *Memory) Async() AsyncMemory { return AsyncMemory{m} }

// StartRead implements blockdev.Async.
func (a AsyncMemory) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	go func() {
		done.IODone(tag, blockdev.Split(p, off, int(a.cfg.MaxTransfer), func(p []byte, off int64) error {
			return a.ReadAt(context.Background(), p, off)
		}))
	}()
}

// StartWrite implements blockdev.Async.
func (a AsyncMemory) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	go func() {
		done.IODone(tag, blockdev.Split(p, off, int(a.cfg.MaxTransfer), func(p []byte, off int64) error {
			return a.WriteAt(context.Background(), p, off, fua)
		}))
	}()
}
