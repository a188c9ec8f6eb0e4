package ublk

import "github.com/iser-attach/iser-attach/blockdev"

// Backend is the block device a ublk device serves: the frontends' shared
// contract (blockdev.Backend). A request fails with the errno its error
// carries (blockdev.Errno) when the block layer has a status for it
// (EIO, ENOSPC, EOPNOTSUPP, ENODATA, EILSEQ, ENOLINK, EREMOTEIO, ETIMEDOUT,
// EBADE); anything else becomes EIO.
type Backend = blockdev.Backend

// BufferProvider is an optional Backend extension: a backend that has its
// own I/O memory (the iSER datamover's RDMA-registered pool) hands out the
// buffers the kernel copies request data into and out of, so the target's
// RDMA READ/WRITE moves data straight between the wire and the request.
//
// IOBuffers is called once per queue with count = queue depth and size =
// the largest request; each buffer must have len >= size, must not overlap
// another, and must stay valid and unmoved until the Device is closed (Go
// heap memory qualifies only while referenced; mmap'd memory is best). The
// backend then receives exactly these slices (or prefixes of them) in
// ReadAt and WriteAt.
type BufferProvider interface {
	IOBuffers(count, size int) ([][]byte, error)
}
