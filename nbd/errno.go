package nbd

import (
	"context"
	"errors"
	"syscall"

	"github.com/iser-attach/iser-attach/blockdev"
)

// errnoOf maps a backend error to the NBD error value of a simple reply:
// its errno (blockdev.Errno) narrowed to the protocol's, else EIO. shuttingDown turns a context cancellation
// into ESHUTDOWN, which tells the client to disconnect.
func errnoOf(err error, shuttingDown bool) uint32 {
	if err == nil {
		return 0
	}
	if en, ok := blockdev.Errno(err); ok {
		return wireErrno(en)
	}
	if shuttingDown && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return errShutdown
	}
	return errIO
}

// wireErrno narrows an errno to the values the protocol defines; the spec
// asks servers to map EDQUOT and EFBIG to ENOSPC, and anything unknown
// becomes EIO.
func wireErrno(en syscall.Errno) uint32 {
	switch en {
	case 0:
		return errIO // an error that claims success is still an error
	case syscall.EPERM, syscall.EROFS, syscall.EACCES:
		return errPerm
	case syscall.EIO:
		return errIO
	case syscall.ENOMEM:
		return errNoMem
	case syscall.EINVAL:
		return errInval
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
		return errNoSpc
	case syscall.EOVERFLOW:
		return errOverflow
	case syscall.ENOTSUP:
		return errNotSup
	case syscall.ESHUTDOWN:
		return errShutdown
	}
	return errIO
}
