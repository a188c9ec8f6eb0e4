package blockdev

// Reaping is a backend whose completions a frontend's event loop may reap
// itself, on its own thread, instead of the backend's completion
// goroutine reaping them and waking the loop for each batch: the loop
// watches the Reaper's descriptor next to its own work (ublk: a POLL_ADD
// in the queue's io_uring) and one wake-up then serves both. A kernel
// initiator completes the same way, in the interrupt that saw the
// completion.
type Reaping interface {
	// Reaper hands the backend's current completion source to the
	// caller, or reports false when there is none to hand over now (no
	// connection, a transport without one, another loop holds it).
	// revoked is called, from any goroutine and never after Release
	// returned, when the source is going away (its connection ends); it
	// must not block. The caller then calls Reap, which reports the end,
	// and Release.
	Reaper(revoked func()) (Reaper, bool)
}

// Reaper is a completion source a loop has taken over (see Reaping).
type Reaper interface {
	// Fd is a descriptor that becomes readable when completions may be
	// waiting. It stays open until Release.
	Fd() int
	// Reap handles every completion that waits, on the caller's
	// goroutine: the IODone calls of the requests they end run there
	// (and must not block, as always). It reports false once the source
	// has ended; its completions then come through the backend's own
	// goroutine again.
	Reap() bool
	// Release gives the source back to the backend's own goroutine. The
	// loop calls it when it stops reaping, and after Reap reported false.
	Release()
}
