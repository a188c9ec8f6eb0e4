//go:build cgo

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// MemoryRegion is page-aligned anonymous memory from mmap (never the Go
// heap), registered with the connection's protection domain for local
// write, remote read and remote write.
//
// Close deregisters and unmaps it; after Close (or the Conn's Close, which
// closes every region still open) the slice Bytes returned must not be
// touched. Close is idempotent and safe from any goroutine, but the caller
// must not close a region that outstanding work requests still use.
type MemoryRegion struct {
	c    *Conn
	mr   *C.struct_ibv_mr
	mem  []byte // the whole mapping
	size int
	lkey uint32
	rkey uint32
	// borrowed: the memory belongs to the caller (RegisterBuffer); Close
	// deregisters it but does not unmap it.
	borrowed bool

	mu     sync.Mutex
	closed bool
}

// RegisterMemory maps size bytes (rounded up to whole pages) and registers
// them. Registration pins the pages: RLIMIT_MEMLOCK must allow it.
func (c *Conn) RegisterMemory(size int) (*MemoryRegion, error) {
	if size <= 0 {
		return nil, fmt.Errorf("rdma register memory: size %d", size)
	}
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.closed.Load() {
		return nil, fmt.Errorf("rdma register memory: %w", ErrClosed)
	}
	page := os.Getpagesize()
	mapped := (size + page - 1) / page * page
	mem, err := syscall.Mmap(-1, 0, mapped, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("rdma register memory: mmap %d bytes: %w", mapped, err)
	}
	addr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	mr, err := C.rd_reg_mr(c.pd, C.uint64_t(addr), C.uint64_t(mapped))
	if mr == nil {
		syscall.Munmap(mem)
		err = ptrErr(err)
		if err == syscall.ENOMEM || err == syscall.EPERM {
			err = fmt.Errorf("%w (RLIMIT_MEMLOCK too low? ulimit -l, LimitMEMLOCK=infinity)", err)
		}
		return nil, fmt.Errorf("rdma register memory: ibv_reg_mr %d bytes: %w", mapped, err)
	}
	m := &MemoryRegion{c: c, mr: mr, mem: mem, size: size, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}
	c.mrMu.Lock()
	c.mrs[m] = struct{}{}
	c.mrMu.Unlock()
	return m, nil
}

// RegisterBuffer registers memory the caller owns and keeps mapped for at
// least as long as the region (page-aligned memory from mmap, never the Go
// heap). Close deregisters it and leaves the memory to the caller: the same
// buffers can be registered again with the next connection.
func (c *Conn) RegisterBuffer(b []byte) (*MemoryRegion, error) {
	page := os.Getpagesize()
	if len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(page) != 0 {
		return nil, fmt.Errorf("rdma register buffer: %d bytes: want page-aligned, non-empty memory", len(b))
	}
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.closed.Load() {
		return nil, fmt.Errorf("rdma register buffer: %w", ErrClosed)
	}
	addr := uint64(uintptr(unsafe.Pointer(&b[0])))
	mr, err := C.rd_reg_mr(c.pd, C.uint64_t(addr), C.uint64_t(len(b)))
	if mr == nil {
		err = ptrErr(err)
		if err == syscall.ENOMEM || err == syscall.EPERM {
			err = fmt.Errorf("%w (RLIMIT_MEMLOCK too low? ulimit -l, LimitMEMLOCK=infinity)", err)
		}
		return nil, fmt.Errorf("rdma register buffer: ibv_reg_mr %d bytes: %w", len(b), err)
	}
	m := &MemoryRegion{c: c, mr: mr, mem: b, size: len(b), lkey: uint32(mr.lkey), rkey: uint32(mr.rkey), borrowed: true}
	c.mrMu.Lock()
	c.mrs[m] = struct{}{}
	c.mrMu.Unlock()
	return m, nil
}

// Bytes returns the region's memory (the size asked for).
func (m *MemoryRegion) Bytes() []byte { return m.mem[:m.size:m.size] }

// Addr returns the virtual address of the first byte, as the peer uses it
// in RDMA requests.
func (m *MemoryRegion) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(&m.mem[0]))) }

// LKey returns the local key for SGEs.
func (m *MemoryRegion) LKey() uint32 { return m.lkey }

// RKey returns the remote key the peer uses for RDMA READ and WRITE.
func (m *MemoryRegion) RKey() uint32 { return m.rkey }

// SGE returns the SGE for n bytes at offset off in the region.
func (m *MemoryRegion) SGE(off, n int) SGE {
	if off < 0 || n < 0 || off+n > m.size {
		panic(fmt.Sprintf("rdma: SGE [%d, %d) outside region of %d bytes", off, off+n, m.size))
	}
	return SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.lkey}
}

// Close deregisters and unmaps the region.
func (m *MemoryRegion) Close() error {
	m.c.mrMu.Lock()
	defer m.c.mrMu.Unlock()
	err := m.release()
	if m.c.mrs != nil {
		delete(m.c.mrs, m)
	}
	if err != nil {
		return fmt.Errorf("rdma memory region close: %w", err)
	}
	return nil
}

// release deregisters and unmaps once; c.mrMu held.
func (m *MemoryRegion) release() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var err error
	if r := C.rd_dereg_mr(m.mr); r != 0 {
		err = fmt.Errorf("ibv_dereg_mr: %w", errnoErr(int(r)))
		// The pages may still be pinned by the device: leak them
		// rather than unmap memory the device could write.
		return err
	}
	if m.borrowed {
		return nil
	}
	if e := syscall.Munmap(m.mem); e != nil {
		err = fmt.Errorf("munmap: %w", e)
	}
	return err
}
