package nbd

import "context"

// Backend is the block device an export serves. The server calls it from many
// goroutines at once (requests are pipelined), so implementations must be safe
// for concurrent use. Offsets and lengths are in bytes and have already been
// bounds-checked and aligned to BlockSize by the server.
//
// Errors: the server answers a failed request with an NBD error reply. It maps
// an error to an errno with errors.As: first to syscall.Errno, then to
// interface{ Errno() syscall.Errno }; anything else becomes EIO.
//
// A Backend that also implements blockdev.Async (initiator.LUN) gets READ
// and WRITE through it: the connection's reader starts them, with no
// worker goroutine, and the backend splits them at its own MaxTransfer.
// Those cannot be cancelled: Shutdown waits for their IODone, Close
// answers them ESHUTDOWN at once and lets their late IODone only give
// the buffer back.
type Backend interface {
	// Size is the export size in bytes.
	Size() int64
	// BlockSize is the logical block size (the NBD minimum block size).
	BlockSize() uint32
	// PreferredBlockSize is the preferred I/O granularity (physical block size
	// or optimal transfer granularity); at least BlockSize.
	PreferredBlockSize() uint32
	// MaxTransfer is the largest read or write the backend takes in one call.
	// The server splits larger requests.
	MaxTransfer() uint32
	// ReadOnly reports a write-protected LUN.
	ReadOnly() bool
	// CanTrim and CanWriteZeroes report whether Trim and WriteZeroes are
	// supported (the export flags are set from them).
	CanTrim() bool
	CanWriteZeroes() bool

	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes p at off; fua asks for the data to be on stable storage
	// before it returns.
	WriteAt(ctx context.Context, p []byte, off int64, fua bool) error
	// Flush makes every completed write stable (SCSI SYNCHRONIZE CACHE).
	Flush(ctx context.Context) error
	// Trim discards the range (SCSI UNMAP).
	Trim(ctx context.Context, off, length int64) error
	// WriteZeroes zeroes the range; mayUnmap allows deallocation
	// (SCSI WRITE SAME(16) with UNMAP when true).
	WriteZeroes(ctx context.Context, off, length int64, mayUnmap bool, fua bool) error
}
