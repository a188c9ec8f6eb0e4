package blockdev

// Done receives the end of a read or write started through Async.
type Done interface {
	// IODone reports the end of the request started with tag: nil, or
	// the error the blocking call would have returned. It runs on the
	// goroutine that completed the request (a backend's completion
	// context, or the goroutine Start* was called on when the request
	// could not start), exactly once; it must not block.
	IODone(tag uint32, err error)
}

// Async starts reads and writes and reports their ends to a Done. A
// request's buffer belongs to the backend until IODone; lengths are
// multiples of the block size, at most the frontend's largest request
// (the backend splits what its own transfer limit requires).
type Async interface {
	StartRead(p []byte, off int64, done Done, tag uint32)
	// StartWrite writes p at off; fua asks for the data on stable storage
	// before IODone.
	StartWrite(p []byte, off int64, fua bool, done Done, tag uint32)
}

// Split calls f for consecutive pieces of p of at most max bytes (all of
// p at once when max is 0), stopping at the first error: a large request
// for a backend with a smaller transfer limit.
func Split(p []byte, off int64, max int, f func(p []byte, off int64) error) error {
	for len(p) > 0 {
		n := len(p)
		if max > 0 && n > max {
			n = max
		}
		if err := f(p[:n], off); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// Batcher is a backend that can hold back what the requests a frontend
// starts in one pass would post to the transport, and post it all at once
// when the pass ends: one doorbell (on soft-RoCE, one system call) for the
// batch instead of one per request. BeginBatch and EndBatch are called in
// pairs on the same goroutine, which must not block in between; EndBatch
// gets what BeginBatch returned.
type Batcher interface {
	BeginBatch() Batch
	EndBatch(Batch)
}

// Batch is what a Batcher needs to end a batch; the zero Batch ends
// nothing.
type Batch struct{ Held any }
