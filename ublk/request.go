package ublk

import (
	"context"
	"fmt"
	"syscall"

	"github.com/iser-attach/iser-attach/blockdev"
)

// blockErrno maps a backend error to the negative errno a request completes
// with. Its errno (blockdev.Errno) is kept where the block layer has a status for it
// (errno_to_blk_status in block/blk-core.c); anything else is EIO, so an
// error never turns into a short or zero-filled success.
func blockErrno(err error) int32 {
	en, _ := blockdev.Errno(err)
	switch en {
	case syscall.EOPNOTSUPP, syscall.ETIMEDOUT, syscall.ENOSPC, syscall.ENOLINK,
		syscall.EREMOTEIO, syscall.EBADE, syscall.ENODATA, syscall.EILSEQ:
		return -int32(en)
	}
	return -int32(syscall.EIO)
}

// request is one I/O the driver handed us: the descriptor and the tag's
// buffer.
type request struct {
	desc ioDesc
	buf  []byte
}

// serve runs one request against the backend and returns the COMMIT result:
// the byte count for READ and WRITE, 0 for the others, or a negative errno.
// maxXfer splits reads and writes for a backend with a smaller MaxTransfer
// than the request (0: no split).
func serve(ctx context.Context, b Backend, r request, maxXfer int, st *stats) int32 {
	off := int64(r.desc.StartSector) << 9
	n := int64(r.desc.NrSectors) << 9
	var err error
	switch r.desc.op() {
	case ioOpRead, ioOpWrite:
		if n > int64(len(r.buf)) || n == 0 {
			err = fmt.Errorf("ublk: %d-byte request for a %d-byte buffer: %w", n, len(r.buf), syscall.EINVAL)
			break
		}
		write := r.desc.op() == ioOpWrite
		fua := r.desc.flags()&ioFlagFUA != 0
		err = rw(ctx, b, r.buf[:n], off, write, fua, maxXfer)
		if err == nil {
			st.done(write, n)
			return int32(n)
		}
	case ioOpFlush:
		err = b.Flush(ctx)
		if err == nil {
			st.flushes.Add(1)
		}
	case ioOpDiscard:
		err = b.Trim(ctx, off, n)
		if err == nil {
			st.discards.Add(1)
		}
	case ioOpWriteZeroes:
		mayUnmap := r.desc.flags()&ioFlagNoUnmap == 0
		err = b.WriteZeroes(ctx, off, n, mayUnmap, r.desc.flags()&ioFlagFUA != 0)
		if err == nil {
			st.writeZeroes.Add(1)
		}
	default:
		err = fmt.Errorf("ublk: op %d: %w", r.desc.op(), syscall.EOPNOTSUPP)
	}
	if err == nil {
		return 0
	}
	st.errors.Add(1)
	return blockErrno(err)
}

func rw(ctx context.Context, b Backend, p []byte, off int64, write, fua bool, maxXfer int) error {
	return blockdev.Split(p, off, maxXfer, func(p []byte, off int64) error {
		if write {
			return b.WriteAt(ctx, p, off, fua)
		}
		return b.ReadAt(ctx, p, off)
	})
}
