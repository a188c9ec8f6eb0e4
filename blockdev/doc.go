// Package blockdev holds the block-backend contract that the frontends
// (ublk, the NBD export, kernel NBD) and the volume layer share, written
// once: Backend, the blocking calls (ublk.Backend and nbd.Backend are
// aliases of it), with Errno, how a frontend reads a
// failed request's errno; and the asynchronous half: a read or write
// started from a frontend's loop and reported by a callback, with no
// goroutine per request.
//
// A backend that has such a path (initiator.LUN, which starts SCSI
// commands with a completion callback) implements Async, and may let a
// frontend's loop post in batches (Batcher) and reap its completions
// (Reaping), and may hand out the memory requests are moved in
// (BufferProvider); a frontend runs the blocking calls of any other
// backend on goroutines of its own.
//
// A frontend finds these capabilities with As, which looks through
// wrappers (a Wrapper's Unwrap, such as counting.Backend's), the outermost
// implementer winning: a wrapper need not forward what it does not watch.
package blockdev
