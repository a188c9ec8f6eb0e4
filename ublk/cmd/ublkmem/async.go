package main

import (
	"context"

	"github.com/iser-attach/iser-attach/blockdev"
)

// asyncDisk serves reads and writes on the ublk queue loop itself
// (blockdev.Async, ended at once): the loop's own cost with no network
// behind it, the floor the VM lab's bench compares the iSER rows with.
type asyncDisk struct{ *fileDisk }

var _ blockdev.Async = asyncDisk{}

// StartRead implements blockdev.Async.
func (d asyncDisk) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	done.IODone(tag, d.ReadAt(context.Background(), p, off))
}

// StartWrite implements blockdev.Async.
func (d asyncDisk) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	done.IODone(tag, d.WriteAt(context.Background(), p, off, fua))
}
