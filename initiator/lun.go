package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// MaxTransfer is the largest read or write the LUN issues as one command:
// 512 KiB, as ib_iser, tgt and LIO size their buffers.
const MaxTransfer = 512 << 10

// LUNInfo describes a logical unit, gathered by OpenLUN.
type LUNInfo struct {
	Number            uint16
	BlockSize         uint32 // logical block size in bytes
	Blocks            uint64 // number of logical blocks
	PhysicalBlockSize uint32
	Vendor, Product   string
	Revision          string
	Serial            string // VPD 0x80
	WWN               string // VPD 0x83, e.g. naa.6001405...
	WriteProtected    bool
	WriteCache        bool // volatile write cache enabled (caching page WCE)
	FUA               bool // DPOFUA in the mode parameter header
	ThinProvisioned   bool // LBPME
	Unmap             bool // UNMAP supported
	WriteSameUnmap    bool // WRITE SAME(16) with UNMAP supported
	ZeroesAfterUnmap  bool // LBPRZ
	Limits            scsi.BlockLimits
}

// Size is the capacity in bytes.
func (i LUNInfo) Size() int64 { return int64(i.Blocks) * int64(i.BlockSize) }

// ErrLUNNotFound is wrapped when the target has no such logical unit.
var ErrLUNNotFound = errors.New("LUN not found")

// Executor runs SCSI commands: a Session, a Nexus that outlives its
// sessions, or a Multipath over several. It may also start commands with
// a callback (Submitter), batch their posts (blockdev.Batcher), hand its
// completion queue to a frontend's loop (blockdev.Reaping) and hand out
// buffers its transport moves without a copy (blockdev.BufferProvider):
// the LUN offers a frontend what its Executor has.
type Executor interface {
	Do(ctx context.Context, c *Command) (*Result, error)
}

// LUN is a logical unit on a session, used as a block device. It
// implements blockdev.Backend and is safe for concurrent use.
//
// It is where a frontend's capabilities are born, not a wrapper of
// another Backend: its Executor is no Backend, and a Nexus's current
// session changes under it. So it implements blockdev.Async, Batcher,
// Reaping and BufferProvider itself, each doing nothing (or the blocking
// path on a goroutine) when the Executor lacks it.
type LUN struct {
	s       Executor
	sub     Submitter               // s, when it can start commands with a callback
	batcher blockdev.Batcher        // s, when it batches posts
	reaping blockdev.Reaping        // s, when a frontend loop may reap its completions
	bufs    blockdev.BufferProvider // s, when its transport has buffers of its own
	lun     scsi.LUN
	info    LUNInfo
	// retries for retryable sense (UNIT ATTENTION, BUSY, ...).
	retries int
	ws      writeSameState
	wc      writeCache
	// blocks is the capacity in logical blocks, info.Blocks as last read
	// (READ CAPACITY again on resize or UNIT ATTENTION 2A/09).
	blocks atomic.Uint64
	cap    capacityWatch
}

var (
	_ blockdev.Backend        = (*LUN)(nil)
	_ blockdev.Async          = (*LUN)(nil)
	_ blockdev.Batcher        = (*LUN)(nil)
	_ blockdev.Reaping        = (*LUN)(nil)
	_ blockdev.BufferProvider = (*LUN)(nil)
)

// OpenLUN probes logical unit n: it clears pending unit attentions and reads
// the inquiry data, capacity, VPD pages and caching mode page.
func OpenLUN(ctx context.Context, s Executor, n uint16) (*LUN, error) {
	l := &LUN{s: s, retries: 8}
	l.sub, _ = s.(Submitter)
	l.batcher, _ = s.(blockdev.Batcher)
	l.reaping, _ = s.(blockdev.Reaping)
	l.bufs, _ = s.(blockdev.BufferProvider)
	enc, err := scsi.EncodeLUN(n)
	if err != nil {
		return nil, fmt.Errorf("open LUN %d: %w", n, err)
	}
	l.lun = enc
	l.info.Number = n
	l.wc.frontendWB.Store(true)
	if b, ok := s.(lunBinder); ok {
		if err := b.bindLUN(ctx, enc); err != nil {
			return nil, fmt.Errorf("open LUN %d: %w", n, err)
		}
	}
	if err := l.probe(ctx); err != nil {
		return nil, fmt.Errorf("open LUN %d: %w", n, err)
	}
	l.blocks.Store(l.info.Blocks)
	if rn, ok := s.(reinstateNotifier); ok {
		rn.OnReinstated(l.reprobeWriteCache)
	}
	return l, nil
}

// Info returns what OpenLUN found, with the write cache as last probed.
func (l *LUN) Info() LUNInfo {
	i := l.info
	i.WriteCache = l.wc.target.Load()
	i.Blocks = l.blocks.Load()
	return i
}

// exec runs one command and turns its status into an error, retrying
// retryable conditions (UNIT ATTENTION, BUSY, TASK SET FULL, a target
// failure in the iSCSI Response, a read ErrUnverifiedRead refused) with a
// short backoff. It returns a Result only for a command that completed:
// GOOD, or CHECK CONDITION with a current RECOVERED ERROR (see
// scsi.CheckStatus).
func (l *LUN) exec(ctx context.Context, cdb scsi.CDB, read, write []byte) (*Result, error) {
	var last error
	for attempt := 0; attempt <= l.retries; attempt++ {
		r, err := l.s.Do(ctx, &Command{LUN: l.lun, CDB: cdb.Bytes(), Read: read, Write: write})
		v := l.judge(cdb, r, err, ctx.Err() != nil)
		switch v.next {
		case attemptDone:
			return r, nil
		case attemptFailed:
			return nil, v.err
		case attemptBackOff:
			if err := backoff(ctx, attempt); err != nil {
				return nil, fmt.Errorf("%s: %w", cdb.Opcode(), err)
			}
		}
		last = v.err
	}
	return nil, last
}

// isTargetFailure says whether err is the target failing a command that
// a sound session may retry: a *ResponseError, or ErrUnverifiedRead.
func isTargetFailure(err error) bool {
	var re *ResponseError
	return errors.As(err, &re) || errors.Is(err, ErrUnverifiedRead)
}

// attemptNext is what follows one attempt of a command (judge).
type attemptNext uint8

const (
	attemptDone    attemptNext = iota // completed: GOOD or RECOVERED ERROR
	attemptFailed                     // a final error
	attemptAgain                      // retry at once (UNIT ATTENTION)
	attemptBackOff                    // retry after a short backoff
)

// verdict is judge's answer: what to do next, and the error of this
// attempt (the final one, or the last one if retries run out).
type verdict struct {
	next attemptNext
	err  error
}

// judge decides on one attempt of cdb that returned r and err, for exec
// and for the asynchronous path alike. cancelled says the caller gave up
// (its context ended): a failed attempt is then final.
func (l *LUN) judge(cdb scsi.CDB, r *Result, err error, cancelled bool) verdict {
	if err != nil && isTargetFailure(err) && !cancelled {
		// The target failed the command (or an uncounted read ended in
		// RECOVERED ERROR) but the session is sound: try again, as Linux
		// retries DID_ERROR.
		return verdict{attemptBackOff, fmt.Errorf("%s: %w", cdb.Opcode(), err)}
	}
	if err != nil {
		return verdict{attemptFailed, fmt.Errorf("%s: %w", cdb.Opcode(), err)}
	}
	err = scsi.CheckStatus(scsi.Status(r.Status), r.Sense)
	if err == nil {
		return verdict{attemptDone, nil}
	}
	last := fmt.Errorf("%s: %w", cdb.Opcode(), err)
	var se scsi.Error
	if !errors.As(err, &se) || !se.Retryable() {
		return verdict{attemptFailed, last}
	}
	var sense *scsi.SenseError
	if errors.As(err, &sense) {
		l.noticeSense(sense)
	}
	if sense == nil || !sense.UnitAttention() {
		return verdict{attemptBackOff, last} // BUSY, TASK SET FULL, becoming ready
	}
	return verdict{attemptAgain, last}
}

// backoff waits a little longer on each attempt, or until ctx ends.
func backoff(ctx context.Context, attempt int) error {
	select {
	case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// transfer runs a read or write that must move all of its bytes.
func (l *LUN) transfer(ctx context.Context, cdb scsi.CDB, read, write []byte) error {
	r, err := l.exec(ctx, cdb, read, write)
	if err != nil {
		return ioErr(err)
	}
	n := len(read) + len(write)
	if got := r.Transferred(n); got != n {
		return ioErr(fmt.Errorf("%s: short transfer: %d of %d bytes (residual %d)", cdb.Opcode(), got, n, r.Residual))
	}
	return nil
}

// ioError carries an errno for block frontends (nbd, ublk).
type ioError struct {
	err   error
	errno syscall.Errno
}

func (e *ioError) Error() string        { return e.err.Error() }
func (e *ioError) Unwrap() error        { return e.err }
func (e *ioError) Errno() syscall.Errno { return e.errno }

// errnoError is an error that knows the errno a block frontend reports
// for it: *ioError, and the scsi.Error types.
type errnoError interface {
	error
	Errno() syscall.Errno
}

// ioErr keeps the sense-derived errno and makes everything else EIO.
func ioErr(err error) error {
	var en errnoError
	if errors.As(err, &en) {
		return err
	}
	return &ioError{err: err, errno: syscall.EIO}
}

func (l *LUN) checkRange(off, length int64) (lba uint64, blocks uint64, err error) {
	bs := int64(l.info.BlockSize)
	if off < 0 || length < 0 || off%bs != 0 || length%bs != 0 {
		return 0, 0, &ioError{fmt.Errorf("I/O at %d+%d not aligned to %d-byte blocks", off, length, bs), syscall.EINVAL}
	}
	if size := l.Size(); off+length > size || off+length < off {
		return 0, 0, &ioError{fmt.Errorf("I/O at %d+%d beyond the %d-byte LUN", off, length, size), syscall.EINVAL}
	}
	return uint64(off / bs), uint64(length / bs), nil
}

// Size implements blockdev.Backend.
func (l *LUN) Size() int64 { return int64(l.blocks.Load()) * int64(l.info.BlockSize) }

// BlockSize implements blockdev.Backend.
func (l *LUN) BlockSize() uint32 { return l.info.BlockSize }

// PreferredBlockSize implements blockdev.Backend.
func (l *LUN) PreferredBlockSize() uint32 {
	p := max(l.info.PhysicalBlockSize, l.info.BlockSize)
	if g := uint32(l.info.Limits.OptimalTransferLengthGranularity) * l.info.BlockSize; g > p && g <= MaxTransfer {
		p = g
	}
	return max(p, 4096)
}

// MaxTransfer implements blockdev.Backend.
func (l *LUN) MaxTransfer() uint32 {
	m := uint32(MaxTransfer)
	if lim := uint64(l.info.Limits.MaxTransferLength) * uint64(l.info.BlockSize); lim > 0 && lim < uint64(m) {
		m = uint32(lim)
	}
	return m
}

// ReadOnly implements blockdev.Backend.
func (l *LUN) ReadOnly() bool { return l.info.WriteProtected }

// CanTrim implements blockdev.Backend.
func (l *LUN) CanTrim() bool { return l.info.Unmap }

// CanWriteZeroes implements blockdev.Backend (WRITE SAME, or zero-filled writes).
func (l *LUN) CanWriteZeroes() bool { return !l.info.WriteProtected }

// ReadAt implements blockdev.Backend.
func (l *LUN) ReadAt(ctx context.Context, p []byte, off int64) error {
	return l.rw(ctx, p, off, false, false)
}

// WriteAt implements blockdev.Backend. fua sets the FUA bit when the LUN takes it
// (DPOFUA); otherwise, as the Linux block layer does, the write is followed
// by SYNCHRONIZE CACHE when the LUN has a volatile write cache. While the
// target's cache is write-back but the frontend still says write-through
// (see OnWriteCacheChange), every write is treated as FUA.
func (l *LUN) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	if l.info.WriteProtected {
		return &ioError{errors.New("write: LUN is write-protected"), syscall.EROFS}
	}
	fua = fua || l.mustMakeDurable()
	if err := l.rw(ctx, p, off, true, fua && l.info.FUA); err != nil {
		return err
	}
	if fua && !l.info.FUA && l.wc.target.Load() {
		return l.Flush(ctx)
	}
	return nil
}

func (l *LUN) rw(ctx context.Context, p []byte, off int64, write, fua bool) error {
	lba, _, err := l.checkRange(off, int64(len(p)))
	if err != nil {
		return err
	}
	bs := int(l.info.BlockSize)
	chunk := int(l.MaxTransfer()) / bs * bs
	for len(p) > 0 {
		n := min(len(p), chunk)
		blocks := uint32(n / bs)
		if write {
			err = l.transfer(ctx, scsi.Write(lba, blocks, fua), nil, p[:n])
		} else {
			err = l.transfer(ctx, scsi.Read(lba, blocks, false), p[:n], nil)
		}
		if err != nil {
			return err
		}
		p = p[n:]
		lba += uint64(blocks)
	}
	return nil
}

// Flush implements blockdev.Backend with SYNCHRONIZE CACHE over the whole medium.
func (l *LUN) Flush(ctx context.Context) error {
	cdb := scsi.SynchronizeCache10(0, 0, false)
	if l.blocks.Load() > 0xffffffff {
		cdb = scsi.SynchronizeCache16(0, 0, false)
	}
	_, err := l.exec(ctx, cdb, nil, nil)
	if err != nil {
		return ioErr(err)
	}
	return nil
}

// IOBuffers implements blockdev.BufferProvider: buffers the datamover
// moves without a copy (see Nexus.IOBuffers), or nil (iSCSI/TCP, a
// Session alone, several paths).
func (l *LUN) IOBuffers(count, size int) ([][]byte, error) {
	if l.bufs == nil {
		return nil, nil
	}
	return l.bufs.IOBuffers(count, size)
}
