package ublk

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
)

// Defaults of DeviceOptions.
const (
	DefaultQueues     = 1
	DefaultQueueDepth = 64
	// DefaultMaxIOBytes is the largest request: 512 KiB, the largest iSER
	// transfer (ib_iser's max_sectors, tgt's and LIO's buffers).
	DefaultMaxIOBytes = 512 << 10
	// DefaultMaxDiscardSectors and DefaultMaxWriteZeroesSectors (1 GiB)
	// apply when the backend can trim / write zeroes; the LUN splits them
	// further to the target's limits.
	DefaultMaxDiscardSectors     = 1 << 21
	DefaultMaxWriteZeroesSectors = 1 << 21
	maxIOBytesLimit              = 1 << 25 // UBLK_IO_BUF_BITS
)

// DeviceOptions shape a device. The zero value is usable: one queue of
// depth 64, 512 KiB requests, no volatile cache, a device number chosen by
// the driver, user recovery on.
type DeviceOptions struct {
	// ID is the device number to ask for (/dev/ublkbID) when FixedID is
	// set; otherwise the driver picks the lowest free one.
	ID      int
	FixedID bool

	// Queues is the number of hardware queues (the driver caps it at the
	// number of CPUs), each served by its own goroutine locked to an OS
	// thread. QueueDepth is the number of requests in flight per queue.
	Queues     int
	QueueDepth int

	// MaxIOBytes is the largest request (max_sectors * 512); it is capped
	// by the backend's MaxTransfer and rounded down to the page size.
	MaxIOBytes int

	// WriteCache announces a volatile write cache (UBLK_ATTR_VOLATILE_CACHE):
	// the kernel then sends FLUSH requests, which reach Backend.Flush. FUA
	// (UBLK_ATTR_FUA, only with WriteCache) lets it send writes with the FUA
	// flag, which reaches Backend.WriteAt's fua argument; without it the
	// kernel emulates FUA with a flush.
	WriteCache bool
	FUA        bool

	// ReadOnly exports the device read-only (also when the backend is):
	// UBLK_ATTR_READ_ONLY in its parameters, and the queues end writes,
	// discards and write-zeroes with EROFS without calling the backend.
	ReadOnly   bool
	Rotational bool

	// Discard and write-zeroes limits (ublk_param_discard). Zero means the
	// default when the backend can trim / write zeroes; setting one for a
	// backend that cannot is an error. DiscardGranularity is in bytes
	// (default: the preferred block size). ublk_drv takes one discard
	// segment per request: MaxDiscardSegments may only be 0 or 1.
	MaxDiscardSectors     uint32
	MaxWriteZeroesSectors uint32
	DiscardGranularity    uint32
	MaxDiscardSegments    uint16

	// NoBatch serves the device with one FETCH_REQ / COMMIT_AND_FETCH_REQ
	// per request even where the kernel offers UBLK_F_BATCH_IO (Linux >=
	// 7.0), which Create otherwise asks for. A device keeps the protocol it
	// was created with: Recover follows the device's flags.
	NoBatch bool

	// NoDeferTaskrun sets up a batch-I/O device's queue rings without
	// IORING_SETUP_DEFER_TASKRUN, which they otherwise have (the driver's
	// completion work for a queue then runs only when its loop waits for
	// completions): to compare the two. Queues with one command per
	// request never defer.
	NoDeferTaskrun bool

	// NoRecovery creates the device without UBLK_F_USER_RECOVERY: when the
	// serving process dies the driver removes the disk and fails its I/O,
	// instead of holding the I/O until Recover.
	NoRecovery bool
}

// geometry is DeviceOptions resolved against a backend.
type geometry struct {
	queues, depth, maxIO int
	flags                uint64
	p                    params
}

func (o DeviceOptions) resolve(b Backend) (geometry, error) {
	var g geometry
	g.queues = o.Queues
	if g.queues == 0 {
		g.queues = DefaultQueues
	}
	g.depth = o.QueueDepth
	if g.depth == 0 {
		g.depth = DefaultQueueDepth
	}
	if g.queues < 0 || g.queues > maxNrQueues {
		return g, fmt.Errorf("ublk options: %d queues (1..%d)", g.queues, maxNrQueues)
	}
	if g.depth < 0 || g.depth > maxQueueDepth {
		return g, fmt.Errorf("ublk options: queue depth %d (1..%d)", g.depth, maxQueueDepth)
	}
	if o.FixedID && (o.ID < 0 || o.ID >= 1<<20) {
		return g, fmt.Errorf("ublk options: device id %d", o.ID)
	}
	g.flags = deviceFlags
	if o.NoRecovery {
		g.flags &^= FlagUserRecovery | FlagUserRecoveryReissue
	}

	bs := b.BlockSize()
	if bs < 512 || bs > 4096 || bs&(bs-1) != 0 {
		return g, fmt.Errorf("ublk options: backend block size %d (512..4096, a power of two)", bs)
	}
	size := b.Size()
	if size <= 0 || size%int64(bs) != 0 {
		return g, fmt.Errorf("ublk options: backend size %d is not a positive multiple of %d", size, bs)
	}
	page := os.Getpagesize()
	g.maxIO = o.MaxIOBytes
	if g.maxIO == 0 {
		g.maxIO = DefaultMaxIOBytes
	}
	if mt := int(b.MaxTransfer()); mt > 0 && mt < g.maxIO {
		g.maxIO = mt
	}
	g.maxIO -= g.maxIO % page
	if g.maxIO < page || g.maxIO > maxIOBytesLimit {
		return g, fmt.Errorf("ublk options: largest request %d bytes (%d..%d)", o.MaxIOBytes, page, maxIOBytesLimit)
	}

	p := &g.p
	p.Types = paramTypeBasic
	p.LogicalBSShift = uint8(bits.TrailingZeros32(bs))
	pbs := max(b.PreferredBlockSize(), bs)
	if pbs&(pbs-1) != 0 {
		pbs = bs
	}
	p.IOOptShift = uint8(bits.TrailingZeros32(min(pbs, uint32(g.maxIO))))
	p.PhysicalBSShift = uint8(bits.TrailingZeros32(min(pbs, uint32(page))))
	p.IOMinShift = p.PhysicalBSShift
	p.MaxSectors = uint32(g.maxIO >> 9)
	p.DevSectors = uint64(size >> 9)

	ro := o.ReadOnly || b.ReadOnly()
	if ro {
		p.Attrs |= attrReadOnly
	}
	if o.Rotational {
		p.Attrs |= attrRotational
	}
	if o.FUA && !o.WriteCache {
		return g, errors.New("ublk options: FUA needs WriteCache (a device without a volatile cache has nothing to force)")
	}
	if o.WriteCache {
		p.Attrs |= attrVolatileCache
		if o.FUA {
			p.Attrs |= attrFUA
		}
	}

	canTrim, canZero := b.CanTrim() && !ro, b.CanWriteZeroes() && !ro
	if o.MaxDiscardSectors != 0 && !canTrim {
		return g, errors.New("ublk options: MaxDiscardSectors set, but the backend cannot trim")
	}
	if o.MaxWriteZeroesSectors != 0 && !canZero {
		return g, errors.New("ublk options: MaxWriteZeroesSectors set, but the backend cannot write zeroes")
	}
	if o.MaxDiscardSegments > 1 {
		return g, fmt.Errorf("ublk options: %d discard segments (ublk_drv takes one)", o.MaxDiscardSegments)
	}
	if canTrim || canZero {
		p.Types |= paramTypeDiscard
		p.DiscardGranularity = o.DiscardGranularity
		if p.DiscardGranularity == 0 {
			p.DiscardGranularity = pbs
		}
		if p.DiscardGranularity%bs != 0 {
			return g, fmt.Errorf("ublk options: discard granularity %d is not a multiple of the block size %d", p.DiscardGranularity, bs)
		}
	}
	if canTrim {
		p.MaxDiscardSectors = o.MaxDiscardSectors
		if p.MaxDiscardSectors == 0 {
			p.MaxDiscardSectors = DefaultMaxDiscardSectors
		}
		p.MaxDiscardSegments = 1
	}
	if canZero {
		p.MaxWriteZeroesSectors = o.MaxWriteZeroesSectors
		if p.MaxWriteZeroesSectors == 0 {
			p.MaxWriteZeroesSectors = DefaultMaxWriteZeroesSectors
		}
	}
	return g, nil
}
