package ublk

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
)

// ioBuffers are the per-tag request buffers of one queue: the backend's own
// (blockdev.BufferProvider, found through wrappers) or, when it has none
// to give, one anonymous page-aligned mapping of our own.
type ioBuffers struct {
	bufs [][]byte
	mem  []byte // our mapping, nil for provided buffers
}

func newIOBuffers(b Backend, count, size int) (*ioBuffers, error) {
	if bp, ok := blockdev.As[blockdev.BufferProvider](b); ok {
		bufs, err := bp.IOBuffers(count, size)
		if err != nil {
			return nil, fmt.Errorf("ublk: backend IOBuffers(%d, %d): %w", count, size, err)
		}
		if bufs != nil {
			return checkIOBuffers(bufs, count, size)
		}
	}
	mem, err := unix.Mmap(-1, 0, count*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("ublk: mmap %d I/O buffers of %d bytes: %w", count, size, err)
	}
	bufs := make([][]byte, count)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return &ioBuffers{bufs: bufs, mem: mem}, nil
}

// checkIOBuffers takes a backend's buffers when there are count of them,
// each at least size long.
func checkIOBuffers(bufs [][]byte, count, size int) (*ioBuffers, error) {
	if len(bufs) != count {
		return nil, fmt.Errorf("ublk: backend IOBuffers gave %d buffers, want %d", len(bufs), count)
	}
	for i, p := range bufs {
		if len(p) < size {
			return nil, fmt.Errorf("ublk: backend IOBuffers: buffer %d has %d bytes, want %d", i, len(p), size)
		}
	}
	return &ioBuffers{bufs: bufs}, nil
}

func (b *ioBuffers) free() {
	if b != nil && b.mem != nil {
		_ = unix.Munmap(b.mem)
		b.mem, b.bufs = nil, nil
	}
}

// uintptrOf is the address of p's first byte, for the kernel.
func uintptrOf(p []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }
