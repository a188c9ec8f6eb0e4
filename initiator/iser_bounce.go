package initiator

import (
	"errors"
	"fmt"
)

// ErrNoBounceSlot is wrapped by the error of a command that found no
// registered bounce slot for its buffer: the pool is at its cap, or
// registering more memory failed (RLIMIT_MEMLOCK). Only that command
// fails; the session stays up.
var ErrNoBounceSlot = errors.New("no registered bounce buffer for the command")

// The iSER bounce pool: registered slots of MaxTransfer bytes for commands
// whose buffers lie outside registered memory. It grows on demand in chunks
// of iserBounceChunk slots, one memory region each, up to queue depth +
// iserSpareData slots. A frontend whose I/O buffers are registered
// (RegisterIOBuffers: ublk over a Nexus) bounces only its small control
// commands (INQUIRY, MODE SENSE, UNMAP parameter lists), so the connection
// pins one chunk instead of a second copy of the I/O buffers; an NBD export
// grows the pool to the concurrency it really uses.

// iserBounceChunk is how many bounce slots one registration adds.
const iserBounceChunk = 8

// MemoryPinner is a datamover that pins (registers) memory for the device:
// PinnedBytes is how much, in total, this connection holds registered now.
type MemoryPinner interface {
	PinnedBytes() int64
}

// PinnedBytes implements MemoryPinner: the control region, the bounce
// chunks allocated so far and the caller's I/O buffers.
func (d *ISERDatamover) PinnedBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pinned
}

// bounceSlotLocked takes a free bounce slot, registering another chunk when
// none is free and the pool is below its cap. It returns the chunk's
// memory and the slot's offset in it.
func (d *ISERDatamover) bounceSlotLocked() (slot int, mem RDMAMemory, off int, err error) {
	if len(d.freeData) == 0 {
		if err := d.growBounceLocked(); err != nil {
			return 0, nil, 0, err
		}
	}
	slot = d.freeData[len(d.freeData)-1]
	d.freeData = d.freeData[:len(d.freeData)-1]
	return slot, d.bounce[slot/iserBounceChunk], slot % iserBounceChunk * d.slot, nil
}

// growBounceLocked registers another chunk of bounce slots, unless the
// pool is at its cap.
func (d *ISERDatamover) growBounceLocked() error {
	if d.nBounce >= d.maxBounce {
		return fmt.Errorf("iser: no free data buffer: all %d in use (too many aborted commands): %w", d.maxBounce, ErrNoBounceSlot)
	}
	n := min(iserBounceChunk, d.maxBounce-d.nBounce)
	m, err := d.conn.RegisterMemory(n * d.slot)
	if err != nil {
		return fmt.Errorf("iser: register %d KiB of bounce buffers (check RLIMIT_MEMLOCK): %w: %w", n*d.slot>>10, ErrNoBounceSlot, err)
	}
	d.bounce = append(d.bounce, m)
	d.pinned += int64(len(m.Bytes()))
	for i := d.nBounce + n - 1; i >= d.nBounce; i-- {
		d.freeData = append(d.freeData, i)
	}
	d.nBounce += n
	return nil
}
