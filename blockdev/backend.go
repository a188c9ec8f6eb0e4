package blockdev

import (
	"context"
	"errors"
	"syscall"
)

// Backend is the blocking half of the block-backend contract: the device a
// frontend serves (an initiator.LUN, or a memory or file disk in tests and
// tools). ublk.Backend and nbd.Backend are this interface.
//
// Frontends call it from many goroutines at once (requests are pipelined),
// so an implementation must be safe for concurrent use. Offsets and
// lengths are in bytes, multiples of BlockSize and inside Size: the
// frontend (the kernel's block layer, the NBD server) has checked them.
// A Backend that also implements Async gets reads and writes through it,
// started from the frontend's loop; everything else comes through these
// calls.
//
// Errors: a frontend finds the errno of a failed request with Errno (a
// syscall.Errno in the chain, else an error with an Errno method) and
// narrows it to what its protocol can say; anything else is EIO.
type Backend interface {
	// Size is the device size in bytes.
	Size() int64
	// BlockSize is the logical block size (512 to 4096, a power of two).
	BlockSize() uint32
	// PreferredBlockSize is the physical block size or optimal I/O
	// granularity; at least BlockSize.
	PreferredBlockSize() uint32
	// MaxTransfer is the largest read or write the backend takes in one
	// call; 0 means no limit of its own. Frontends split larger requests.
	MaxTransfer() uint32
	// ReadOnly reports a write-protected device.
	ReadOnly() bool
	// CanTrim and CanWriteZeroes report whether Trim and WriteZeroes are
	// supported.
	CanTrim() bool
	CanWriteZeroes() bool

	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes p at off; fua asks for the data on stable storage
	// before it returns.
	WriteAt(ctx context.Context, p []byte, off int64, fua bool) error
	// Flush makes every completed write stable (SCSI SYNCHRONIZE CACHE).
	Flush(ctx context.Context) error
	// Trim discards the range (SCSI UNMAP).
	Trim(ctx context.Context, off, length int64) error
	// WriteZeroes zeroes the range; mayUnmap allows deallocation (SCSI
	// WRITE SAME(16) with UNMAP).
	WriteZeroes(ctx context.Context, off, length int64, mayUnmap, fua bool) error
}

// Errnoer is implemented by a backend error that picks its own errno (a
// SCSI status or sense translated by the initiator).
type Errnoer interface {
	Errno() syscall.Errno
}

// Errno is the errno a backend error carries: a syscall.Errno in its
// chain first, then an Errnoer's. ok is false when it carries none (the
// frontend then reports EIO, or its own reading of the error).
func Errno(err error) (en syscall.Errno, ok bool) {
	if errors.As(err, &en) {
		return en, true
	}
	var e Errnoer
	if errors.As(err, &e) {
		return e.Errno(), true
	}
	return 0, false
}
