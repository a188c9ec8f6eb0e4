package blockdev

// This file holds the capability seam: how a frontend finds what a backend
// can do beyond the blocking calls (Async, Batcher, Reaping,
// BufferProvider) through the wrappers between it and the device.

// Wrapper is a Backend that wraps another (counting.Backend around an
// initiator.LUN): Unwrap returns the wrapped one, and As looks through it
// for capabilities. A wrapper implements a capability itself only when it
// must see what passes (counting.Backend implements Async to count completions);
// any other capability of the backend below stays reachable without it.
type Wrapper interface {
	Backend
	Unwrap() Backend
}

// As finds capability T (an interface: Async, Batcher, Reaping,
// BufferProvider) on b or on the backends b wraps, following Unwrap; the
// outermost implementer wins, as with errors.As. A frontend asks once,
// when it starts serving b, and keeps what it found.
func As[T any](b Backend) (T, bool) {
	for b != nil {
		if t, ok := b.(T); ok {
			return t, true
		}
		w, ok := b.(Wrapper)
		if !ok {
			break
		}
		b = w.Unwrap()
	}
	var zero T
	return zero, false
}

// BufferProvider is a backend that has its own I/O memory (the iSER
// datamover's RDMA-registered pool) and hands out the buffers a frontend
// copies request data into and out of (ublk: the kernel copies there), so
// the target's RDMA READ/WRITE moves data straight between the wire and
// the request.
//
// IOBuffers is called once per queue with count = queue depth and size =
// the largest request. It returns nil, and no error, when it has none to
// give (an initiator.LUN over iSCSI/TCP, or over several paths): the
// frontend then uses memory of its own. Otherwise it returns count
// buffers, each with len >= size, none overlapping another, valid and
// unmoved until the frontend is closed (Go heap memory qualifies only
// while referenced; mmap'd memory is best); the backend then receives
// exactly these slices (or prefixes of them) in ReadAt, WriteAt and Async.
type BufferProvider interface {
	IOBuffers(count, size int) ([][]byte, error)
}
