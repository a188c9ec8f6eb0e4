// Package blockdev holds the asynchronous half of the block-backend
// contract that the frontends (ublk, the NBD export, kernel NBD) and the
// volume layer share: a read or write started from a frontend's loop and
// reported by a callback, with no goroutine per request.
//
// A backend that has such a path (initiator.LUN, which starts SCSI
// commands with a completion callback) implements Async; a frontend runs
// the blocking calls of any other backend on goroutines of its own.
package blockdev
