package initiator

import (
	"context"
	"fmt"
	"sync"
)

// A LUN can grow (or shrink) at the target while a volume is attached. The
// LUN reads its capacity again when asked (Rescan: iser-attach resize) and
// on UNIT ATTENTION 2A/09 (CAPACITY DATA HAS CHANGED), and tells the
// frontend of a change.

// CapacityFunc is a frontend's reaction to a new LUN size, in bytes.
type CapacityFunc func(oldSize, newSize int64)

// capacityWatch is the LUN's capacity re-reading on UNIT ATTENTION.
type capacityWatch struct {
	mu       sync.Mutex
	onChange CapacityFunc
	probing  bool // a re-read goroutine runs
	again    bool // another re-read was asked for meanwhile
	rescan   sync.Mutex
}

// OnCapacityChange registers f, called after a re-read the UNIT ATTENTION
// 2A/09 started finds another size. f is called from a goroutine of the
// LUN's, one call at a time, never from an I/O path.
func (l *LUN) OnCapacityChange(f CapacityFunc) {
	l.cap.mu.Lock()
	defer l.cap.mu.Unlock()
	l.cap.onChange = f
}

// Rescan reads the capacity again (READ CAPACITY) and makes it the LUN's:
// Size and I/O range checks follow at once. It returns the sizes before and
// after, in bytes. A changed logical block size is refused (the LUN keeps
// its size): that is another disk.
func (l *LUN) Rescan(ctx context.Context) (oldSize, newSize int64, err error) {
	l.cap.rescan.Lock()
	defer l.cap.rescan.Unlock()
	var info LUNInfo
	if err := l.readCapacity(ctx, &info); err != nil {
		return 0, 0, fmt.Errorf("rescan LUN %d: %w", l.info.Number, err)
	}
	oldSize = l.Size()
	if info.BlockSize != l.info.BlockSize {
		return oldSize, oldSize, fmt.Errorf("rescan LUN %d: logical block size changed from %d to %d bytes",
			l.info.Number, l.info.BlockSize, info.BlockSize)
	}
	l.blocks.Store(info.Blocks)
	return oldSize, l.Size(), nil
}

// rescanOnAttention re-reads the capacity in a goroutine of its own (the
// caller is an I/O path); requests while one runs make it run once more.
func (l *LUN) rescanOnAttention() {
	l.cap.mu.Lock()
	defer l.cap.mu.Unlock()
	if l.cap.probing {
		l.cap.again = true
		return
	}
	l.cap.probing = true
	go l.rescanLoop()
}

func (l *LUN) rescanLoop() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), reprobeTimeout)
		oldSize, newSize, err := l.Rescan(ctx)
		cancel()
		l.cap.mu.Lock()
		f := l.cap.onChange
		l.cap.mu.Unlock()
		if err == nil && oldSize != newSize && f != nil {
			f(oldSize, newSize)
		}
		l.cap.mu.Lock()
		if !l.cap.again {
			l.cap.probing = false
			l.cap.mu.Unlock()
			return
		}
		l.cap.again = false
		l.cap.mu.Unlock()
	}
}
