package ublk

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A provided-buffer ring (IORING_REGISTER_PBUF_RING, Linux 5.19): buffers
// the kernel picks from for a command with IOSQE_BUFFER_SELECT, here the
// multishot FETCH_IO_CMDS of UBLK_F_BATCH_IO. Layouts from
// include/uapi/linux/io_uring.h.

const (
	registerPbufRing   = 22 // IORING_REGISTER_PBUF_RING
	unregisterPbufRing = 23 // IORING_UNREGISTER_PBUF_RING

	sqeFlagBufferSelect = 1 << 5 // IOSQE_BUFFER_SELECT
	sqeBufIndex         = 40     // buf_index / buf_group (u16)
	uringCmdMultishot   = 1 << 1 // IORING_URING_CMD_MULTISHOT, in uring_cmd_flags

	cqeFBuffer     = 1 << 0 // IORING_CQE_F_BUFFER: the upper 16 bits are the buffer id
	cqeFMore       = 1 << 1 // IORING_CQE_F_MORE: the multishot command stays armed
	cqeBufferShift = 16

	sizeofBufRingEntry = 16 // struct io_uring_buf
	sizeofBufReg       = 40 // struct io_uring_buf_reg
)

// bufRing is one registered buffer group: entries buffers of size bytes,
// all in one anonymous mapping, and the ring of struct io_uring_buf the
// kernel takes them from. Each completion that carries a buffer consumes
// one whole entry (no IOU_PBUF_RING_INC); give hands it back. Owned by the
// ring's goroutine.
type bufRing struct {
	ringMem []byte // entries * 16, page-aligned: the kernel pins it
	bufMem  []byte // entries * size
	size    int
	mask    uint16
	bgid    uint16
	tail    uint16
	bid0    uint16 // entry 0's bid: the tail shares its 32-bit word
}

// registerBufRing maps and registers a buffer group of entries (a power
// of two) buffers of size bytes each, all of them given to the kernel.
func (r *ring) registerBufRing(bgid uint16, entries, size int) (*bufRing, error) {
	if entries <= 0 || entries > 1<<15 || entries&(entries-1) != 0 || size <= 0 {
		return nil, fmt.Errorf("io_uring buffer ring: %d entries of %d bytes", entries, size)
	}
	br := &bufRing{size: size, mask: uint16(entries - 1), bgid: bgid}
	var err error
	br.ringMem, err = unix.Mmap(-1, 0, roundUp(entries*sizeofBufRingEntry, unix.Getpagesize()),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("io_uring buffer ring: mmap: %w", err)
	}
	br.bufMem, err = unix.Mmap(-1, 0, roundUp(entries*size, unix.Getpagesize()),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		br.unmap()
		return nil, fmt.Errorf("io_uring buffer ring: mmap buffers: %w", err)
	}
	var reg [sizeofBufReg]byte
	le.PutUint64(reg[0:], uint64(uintptr(unsafe.Pointer(&br.ringMem[0]))))
	le.PutUint32(reg[8:], uint32(entries))
	le.PutUint16(reg[12:], bgid)
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerPbufRing, uintptr(unsafe.Pointer(&reg[0])), 1, 0, 0)
	if errno != 0 {
		br.unmap()
		return nil, fmt.Errorf("io_uring_register PBUF_RING: %w", errno)
	}
	for i := 0; i < entries; i++ {
		br.give(uint16(i))
	}
	return br, nil
}

// buf is buffer bid.
func (br *bufRing) buf(bid uint16) []byte {
	off := int(bid) * br.size
	return br.bufMem[off : off+br.size : off+br.size]
}

// give hands buffer bid (back) to the kernel: its entry at the tail, then
// the tail moved on with one atomic store. The tail is a u16 in the last
// bytes of entry 0 (struct io_uring_buf_ring), in one 32-bit word with
// entry 0's bid, which is stored with it.
func (br *bufRing) give(bid uint16) {
	i := int(br.tail & br.mask)
	e := br.ringMem[i*sizeofBufRingEntry : (i+1)*sizeofBufRingEntry]
	le.PutUint64(e[0:], uint64(uintptr(unsafe.Pointer(&br.buf(bid)[0]))))
	le.PutUint32(e[8:], uint32(br.size))
	if i == 0 {
		br.bid0 = bid
	} else {
		le.PutUint16(e[12:], bid)
	}
	br.tail++
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&br.ringMem[12])), uint32(br.bid0)|uint32(br.tail)<<16)
}

// unregister removes the group from r (before r closes, or after: the
// ring's close frees it too) and unmaps its memory.
func (br *bufRing) unregister(r *ring) {
	if br == nil {
		return
	}
	if r != nil && r.fd >= 0 {
		var reg [sizeofBufReg]byte
		le.PutUint16(reg[12:], br.bgid)
		_, _, _ = unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), unregisterPbufRing, uintptr(unsafe.Pointer(&reg[0])), 1, 0, 0)
	}
	br.unmap()
}

func (br *bufRing) unmap() {
	if br.ringMem != nil {
		_ = unix.Munmap(br.ringMem)
		br.ringMem = nil
	}
	if br.bufMem != nil {
		_ = unix.Munmap(br.bufMem)
		br.bufMem = nil
	}
}
