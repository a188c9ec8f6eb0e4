package ublk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

type senseErr struct{ en syscall.Errno }

func (e senseErr) Error() string        { return "sense" }
func (e senseErr) Errno() syscall.Errno { return e.en }
func desc(op uint8, flags uint32, sector, sectors int) ioDesc {
	return ioDesc{OpFlags: uint32(op) | flags, StartSector: uint64(sector), NrSectors: uint32(sectors)}
}

func TestServe(t *testing.T) {
	ctx := context.Background()
	m := newMemBackend(1<<20, 512)
	var st stats
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	want := append([]byte(nil), buf[:8192]...)

	if res := serve(ctx, m, request{desc(ioOpWrite, ioFlagFUA, 8, 16), buf}, 0, &st); res != 8192 {
		t.Fatalf("WRITE res %d", res)
	}
	if !bytes.Equal(m.data[4096:4096+8192], want) || m.fuaWrites != 1 {
		t.Fatalf("write did not land with FUA (fua writes %d)", m.fuaWrites)
	}
	clear(buf)
	if res := serve(ctx, m, request{desc(ioOpRead, 0, 8, 16), buf}, 0, &st); res != 8192 || !bytes.Equal(buf[:8192], want) {
		t.Fatalf("READ res %d, data differs", res)
	}
	// A backend with a smaller MaxTransfer gets the request in pieces.
	m.reads = 0
	if res := serve(ctx, m, request{desc(ioOpRead, 0, 0, 64), buf}, 4096, &st); res != 32768 || m.reads != 8 {
		t.Fatalf("split READ res %d in %d calls, want 32768 in 8", res, m.reads)
	}
	if res := serve(ctx, m, request{desc(ioOpFlush, 0, 0, 0), buf}, 0, &st); res != 0 || m.flushes != 1 {
		t.Fatalf("FLUSH res %d flushes %d", res, m.flushes)
	}
	if res := serve(ctx, m, request{desc(ioOpDiscard, 0, 8, 8), buf}, 0, &st); res != 0 || m.lastTrim != [2]int64{4096, 4096} {
		t.Fatalf("DISCARD res %d trim %v", res, m.lastTrim)
	}
	if !bytes.Equal(m.data[4096:8192], make([]byte, 4096)) {
		t.Fatal("DISCARD left data")
	}
	if res := serve(ctx, m, request{desc(ioOpWriteZeroes, ioFlagNoUnmap, 16, 8), buf}, 0, &st); res != 0 ||
		m.lastZero != [2]int64{8192, 4096} || m.lastMayUnmap {
		t.Fatalf("WRITE_ZEROES NOUNMAP res %d zero %v mayUnmap %v", res, m.lastZero, m.lastMayUnmap)
	}
	if res := serve(ctx, m, request{desc(ioOpWriteZeroes, 0, 16, 8), buf}, 0, &st); res != 0 || !m.lastMayUnmap {
		t.Fatalf("WRITE_ZEROES res %d mayUnmap %v", res, m.lastMayUnmap)
	}
	if res := serve(ctx, m, request{desc(ioOpWriteSame, 0, 0, 8), buf}, 0, &st); res != -int32(syscall.EOPNOTSUPP) {
		t.Fatalf("WRITE_SAME res %d, want -EOPNOTSUPP", res)
	}
	if res := serve(ctx, m, request{desc(ioOpRead, 0, 0, 256), buf}, 0, &st); res != -int32(syscall.EIO) {
		t.Fatalf("READ larger than the buffer: res %d, want -EIO", res)
	}
	got := st.snapshot()
	if got.Reads != 2 || got.Writes != 1 || got.BytesRead != 8192+32768 || got.BytesWritten != 8192 ||
		got.Flushes != 1 || got.Discards != 1 || got.Zeroes != 2 || got.Errors != 2 {
		t.Fatalf("stats %+v", got)
	}
}

// Backend errors become the request's errno; nothing is completed as a
// short or zero-filled success.
func TestServeErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{syscall.EIO, syscall.EIO},
		{fmt.Errorf("read: %w", syscall.ENOSPC), syscall.ENOSPC},
		{senseErr{syscall.ENODATA}, syscall.ENODATA}, // medium error
		{fmt.Errorf("scsi: %w", senseErr{syscall.EILSEQ}), syscall.EILSEQ},
		{senseErr{syscall.EROFS}, syscall.EIO}, // no block status for EROFS
		{senseErr{syscall.EBUSY}, syscall.EIO}, // resource statuses mean retry
		{errors.New("connection lost"), syscall.EIO},
		{context.Canceled, syscall.EIO},
	} {
		m := newMemBackend(1<<16, 512)
		m.failFrom, m.failTo, m.failErr = 0, 1<<16, tc.err
		var st stats
		buf := make([]byte, 4096)
		for _, op := range []uint8{ioOpRead, ioOpWrite} {
			if res := serve(ctx, m, request{desc(op, 0, 0, 8), buf}, 0, &st); res != -int32(tc.want) {
				t.Errorf("op %d with %v: res %d, want -%d (%v)", op, tc.err, res, tc.want, tc.want)
			}
		}
		if st.snapshot().Errors != 2 {
			t.Errorf("errors counted %d", st.snapshot().Errors)
		}
	}
}
