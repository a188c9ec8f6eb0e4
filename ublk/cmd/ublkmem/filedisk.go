package main

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fileDisk is a ublk.Backend on a regular file: pread/pwrite, fsync for
// FLUSH and FUA, hole punching for DISCARD and WRITE_ZEROES.
type fileDisk struct {
	f    *os.File
	size int64
}

func openFileDisk(path string, size int64) (*fileDisk, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open backing file: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat backing file: %w", err)
	}
	if fi.Size() == 0 {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("size backing file: %w", err)
		}
	} else {
		size = fi.Size()
	}
	return &fileDisk{f: f, size: size &^ 4095}, nil
}

func (d *fileDisk) Close() error               { return d.f.Close() }
func (d *fileDisk) Size() int64                { return d.size }
func (d *fileDisk) BlockSize() uint32          { return 512 }
func (d *fileDisk) PreferredBlockSize() uint32 { return 4096 }
func (d *fileDisk) MaxTransfer() uint32        { return 0 }
func (d *fileDisk) ReadOnly() bool             { return false }
func (d *fileDisk) CanTrim() bool              { return true }
func (d *fileDisk) CanWriteZeroes() bool       { return true }

func (d *fileDisk) ReadAt(_ context.Context, p []byte, off int64) error {
	if _, err := d.f.ReadAt(p, off); err != nil {
		return fmt.Errorf("read backing file: %w", err)
	}
	return nil
}

func (d *fileDisk) WriteAt(_ context.Context, p []byte, off int64, fua bool) error {
	if _, err := d.f.WriteAt(p, off); err != nil {
		return fmt.Errorf("write backing file: %w", err)
	}
	if fua {
		return d.sync()
	}
	return nil
}

func (d *fileDisk) Flush(context.Context) error { return d.sync() }

func (d *fileDisk) sync() error {
	if err := unix.Fdatasync(int(d.f.Fd())); err != nil {
		return fmt.Errorf("fdatasync backing file: %w", err)
	}
	return nil
}

func (d *fileDisk) Trim(_ context.Context, off, n int64) error {
	return d.punch(off, n)
}

func (d *fileDisk) WriteZeroes(_ context.Context, off, n int64, _, fua bool) error {
	if err := d.punch(off, n); err != nil {
		return err
	}
	if fua {
		return d.sync()
	}
	return nil
}

func (d *fileDisk) punch(off, n int64) error {
	if err := unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return fmt.Errorf("punch hole in backing file: %w", err)
	}
	return nil
}
