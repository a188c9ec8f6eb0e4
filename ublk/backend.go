package ublk

import "context"

// Backend is the block device a ublk device serves (an initiator.LUN, or a
// memory disk in tests). Its methods are called from many goroutines at once,
// up to QueueDepth per queue, so it must be safe for concurrent use. Offsets
// and lengths are in bytes, multiples of BlockSize, and inside Size: the
// kernel's block layer has checked them against the parameters Create set.
//
// Errors complete the request with an errno found by errors.As, first as a
// syscall.Errno, then as interface{ Errno() syscall.Errno }; the errno is kept
// when the block layer has a status for it (EIO, ENOSPC, EOPNOTSUPP,
// ENODATA, EILSEQ, ENOLINK, EREMOTEIO, ETIMEDOUT, EBADE),
// anything else becomes EIO.
type Backend interface {
	// Size is the device size in bytes.
	Size() int64
	// BlockSize is the logical block size (512 to 4096, a power of two).
	BlockSize() uint32
	// PreferredBlockSize is the physical block size or optimal granularity.
	PreferredBlockSize() uint32
	// MaxTransfer is the largest read or write the backend takes in one
	// call; 0 means no limit of its own.
	MaxTransfer() uint32
	ReadOnly() bool
	CanTrim() bool
	CanWriteZeroes() bool

	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes p at off; fua asks for the data on stable storage
	// before it returns.
	WriteAt(ctx context.Context, p []byte, off int64, fua bool) error
	// Flush makes completed writes stable.
	Flush(ctx context.Context) error
	// Trim discards the range.
	Trim(ctx context.Context, off, length int64) error
	// WriteZeroes zeroes the range; mayUnmap allows deallocation.
	WriteZeroes(ctx context.Context, off, length int64, mayUnmap, fua bool) error
}

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
