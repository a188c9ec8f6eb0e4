package ublk

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A small io_uring: exactly what ublk needs (IORING_OP_URING_CMD with 64- or
// 128-byte SQEs, POLL_ADD, NOP) and nothing else. Layouts and numbers are
// from include/uapi/linux/io_uring.h.

const (
	opNop      = 0
	opPollAdd  = 6
	opPollRem  = 7
	opURingCmd = 46

	setupCoopTaskrun  = 1 << 8
	setupSQE128       = 1 << 10
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13

	enterGetEvents = 1 << 0
	enterExtArg    = 1 << 3

	featSingleMmap = 1 << 0
	featExtArg     = 1 << 8

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	sizeofCQE = 16
)

// SQE field offsets (struct io_uring_sqe).
const (
	sqeOpcode   = 0
	sqeFlags    = 1
	sqeFd       = 4
	sqeOff      = 8 // cmd_op (u32) for URING_CMD
	sqeAddr     = 16
	sqeLen      = 24
	sqeOpFlags  = 28 // poll32_events, uring_cmd_flags
	sqeUserData = 32
	sqeCmd      = 48 // the command area: 16 bytes, 80 with SQE128
)

// sqOffsets is struct io_sqring_offsets.
type sqOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

// cqOffsets is struct io_cqring_offsets.
type cqOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, CQEs, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

// uringParams is struct io_uring_params (120 bytes).
type uringParams struct {
	SQEntries, CQEntries, Flags, SQThreadCPU, SQThreadIdle, Features, WQFd uint32
	Resv                                                                   [3]uint32
	SQOff                                                                  sqOffsets
	CQOff                                                                  cqOffsets
}

// getEventsArg is struct io_uring_getevents_arg, for waits with a timeout.
type getEventsArg struct {
	Sigmask   uint64
	SigmaskSz uint32
	Pad       uint32
	TS        uint64
}

// cqe is one completion.
type cqe struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// ring is one io_uring instance. It is not safe for concurrent use: a
// queue's ring belongs to its goroutine, the control ring is used under a
// mutex.
type ring struct {
	fd       int
	flags    uint32 // the IORING_SETUP_* flags it was set up with
	sqeSize  int
	features uint32
	entries  uint32

	sqMem, cqMem, sqeMem []byte

	sqHead, sqTail, sqMask *uint32
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer

	singleMmap bool

	// rawWait makes enter wait without telling the Go scheduler (see
	// enter): for a loop holding a rawwait.Slot.
	rawWait bool

	tail uint32 // our copy of the SQ tail (entries prepared so far)

	wait *waitArgs // on the heap: the kernel reads it during io_uring_enter
}

type waitArgs struct {
	arg getEventsArg
	ts  unix.Timespec
}

// errRingFull: no free SQE; submit and reap first.
var errRingFull = errors.New("io_uring: submission queue full")

// newRing sets up an io_uring with at least entries SQEs; sqe128 selects
// 128-byte SQEs (IORING_SETUP_SQE128, needed for ublk control commands).
func newRing(entries uint32, sqe128 bool) (*ring, error) {
	return newRingFlags(entries, sqe128, false)
}

// newRingFlags is newRing; deferred also asks for IORING_SETUP_SINGLE_ISSUER
// and IORING_SETUP_DEFER_TASKRUN (Linux 6.1), where the kernel has them:
// completion work queued for this task (ublk's dispatches and commits run
// as task work) waits until the task itself waits for completions in
// io_uring_enter, instead of interrupting it whenever it runs. Only for a
// ring one thread alone submits to and waits on (a queue loop, locked to
// its thread).
func newRingFlags(entries uint32, sqe128, deferred bool) (*ring, error) {
	if entries == 0 || entries > 32768 {
		return nil, fmt.Errorf("io_uring_setup: %d entries: %w", entries, syscall.EINVAL)
	}
	var p uringParams
	flags := uint32(setupCoopTaskrun)
	if sqe128 {
		flags |= setupSQE128
	}
	if deferred {
		p.Flags = flags | setupSingleIssuer | setupDeferTaskrun
		if fd, err := uringSetup(entries, &p); err == nil {
			return mapRing(fd, &p, sqe128)
		}
		p = uringParams{}
	}
	p.Flags = flags
	fd, err := uringSetup(entries, &p)
	if errors.Is(err, syscall.EINVAL) {
		// COOP_TASKRUN is 5.19, like SQE128; retry without it so the error
		// that comes back names the real problem.
		p = uringParams{Flags: flags &^ setupCoopTaskrun}
		fd, err = uringSetup(entries, &p)
	}
	if err != nil {
		return nil, fmt.Errorf("io_uring_setup: %w", err)
	}
	return mapRing(fd, &p, sqe128)
}

// mapRing maps the rings of a set-up io_uring fd.
func mapRing(fd int, p *uringParams, sqe128 bool) (*ring, error) {
	r := &ring{fd: fd, features: p.Features, entries: p.SQEntries, sqeSize: 64, wait: &waitArgs{}, flags: p.Flags}
	if sqe128 {
		r.sqeSize = 128
	}
	if err := r.mmap(p); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func uringSetup(entries uint32, p *uringParams) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func (r *ring) mmap(p *uringParams) error {
	sqSize := int(p.SQOff.Array) + int(p.SQEntries)*4
	cqSize := int(p.CQOff.CQEs) + int(p.CQEntries)*sizeofCQE
	var err error
	if p.Features&featSingleMmap != 0 {
		sqSize = max(sqSize, cqSize)
	}
	r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("io_uring mmap sq ring: %w", err)
	}
	if p.Features&featSingleMmap != 0 {
		r.cqMem, r.singleMmap = r.sqMem, true
	} else {
		r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("io_uring mmap cq ring: %w", err)
		}
	}
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.SQEntries)*r.sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("io_uring mmap sqes: %w", err)
	}
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail, r.sqMask = u32(r.sqMem, p.SQOff.Head), u32(r.sqMem, p.SQOff.Tail), u32(r.sqMem, p.SQOff.RingMask)
	r.cqHead, r.cqTail, r.cqMask = u32(r.cqMem, p.CQOff.Head), u32(r.cqMem, p.CQOff.Tail), u32(r.cqMem, p.CQOff.RingMask)
	r.cqes = unsafe.Pointer(&r.cqMem[p.CQOff.CQEs])
	// The SQ index array maps slot i to SQE i, once and for all.
	for i := uint32(0); i < p.SQEntries; i++ {
		*u32(r.sqMem, p.SQOff.Array+4*i) = i
	}
	r.tail = atomic.LoadUint32(r.sqTail)
	return nil
}

// close unmaps the rings and closes the fd; the kernel then cancels what is
// still in flight. Idempotent.
func (r *ring) close() error {
	if r == nil || r.fd < 0 {
		return nil
	}
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && !r.singleMmap {
		_ = unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		_ = unix.Munmap(r.sqMem)
	}
	r.sqeMem, r.cqMem, r.sqMem = nil, nil, nil
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("io_uring close: %w", err)
	}
	return nil
}

// sqe returns the next free SQE, zeroed, or nil when the SQ is full.
func (r *ring) sqe() []byte {
	head := atomic.LoadUint32(r.sqHead)
	if r.tail-head >= r.entries {
		return nil
	}
	i := int(r.tail & *r.sqMask)
	r.tail++
	b := r.sqeMem[i*r.sqeSize : (i+1)*r.sqeSize]
	clear(b)
	return b
}

// sqeSubmitting is sqe, submitting what is prepared first when the SQ is
// full (nil only if the kernel then takes none).
func (r *ring) sqeSubmitting() []byte {
	if s := r.sqe(); s != nil {
		return s
	}
	_ = r.enter(0, 0)
	return r.sqe()
}

// pending is the number of prepared SQEs the kernel has not consumed.
func (r *ring) pending() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// enter publishes the prepared SQEs and calls io_uring_enter, waiting for at
// least minComplete completions. EINTR (Go's preemption signals land on
// every thread) is retried. With a timeout > 0 the wait ends after it with
// ETIME (which is not an error: the caller looks at the CQ).
//
// With rawWait the call is a raw system call: the goroutine keeps its P
// while the kernel waits, as if it were running. A blocking system call
// made the usual way lets the scheduler's monitor take the P back, and
// every return then costs a round of futex wake-ups and thread switches
// on other threads (measured: 3 futex calls and a monitor wake-up per
// wait; twice per request at queue depth 1). The runtime still gets the
// P when it needs it: a preemption (a stop-the-world, or the monitor's
// every 10 ms for a goroutine that looks busy) is a signal, the wait
// returns EINTR, and enter yields and returns: the caller looks at the CQ
// and decides how to wait next (queue.run waits the usual way once idle,
// drainState.rawWait).
func (r *ring) enter(minComplete uint32, timeout time.Duration) error {
	atomic.StoreUint32(r.sqTail, r.tail)
	for {
		toSubmit := r.pending()
		flags := uintptr(0)
		if minComplete > 0 {
			flags |= enterGetEvents
		}
		var argp, argsz uintptr
		if timeout > 0 && minComplete > 0 && r.features&featExtArg != 0 {
			r.wait.ts = unix.NsecToTimespec(timeout.Nanoseconds())
			r.wait.arg = getEventsArg{SigmaskSz: 8, TS: uint64(uintptr(unsafe.Pointer(&r.wait.ts)))}
			flags |= enterExtArg
			argp, argsz = uintptr(unsafe.Pointer(&r.wait.arg)), unsafe.Sizeof(r.wait.arg)
		}
		var errno syscall.Errno
		if r.rawWait && minComplete > 0 {
			_, _, errno = unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), flags, argp, argsz)
		} else {
			_, _, errno = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), flags, argp, argsz)
		}
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			if r.rawWait {
				// The preemption the signal asked for; then the caller
				// decides again how to wait (an idle loop stops waiting
				// raw: the monitor preempts it every 10 ms).
				runtime.Gosched()
				return nil
			}
			if r.ready() > 0 {
				return nil
			}
			continue
		case syscall.ETIME:
			return nil
		}
		return fmt.Errorf("io_uring_enter: %w", errno)
	}
}

// ready is the number of CQEs waiting.
func (r *ring) ready() uint32 { return atomic.LoadUint32(r.cqTail) - atomic.LoadUint32(r.cqHead) }

// peek returns the next completion without consuming it.
func (r *ring) peek() (cqe, bool) {
	head := atomic.LoadUint32(r.cqHead)
	if head == atomic.LoadUint32(r.cqTail) {
		return cqe{}, false
	}
	c := *(*cqe)(unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*sizeofCQE))
	return c, true
}

// advance consumes one completion.
func (r *ring) advance() { atomic.AddUint32(r.cqHead, 1) }

// prepURingCmd fills an IORING_OP_URING_CMD SQE for fd with cmd_op; the
// caller writes the command into the returned command area.
func prepURingCmd(sqe []byte, fd int, cmdOp uint32, userData uint64) []byte {
	sqe[sqeOpcode] = opURingCmd
	le.PutUint32(sqe[sqeFd:], uint32(int32(fd)))
	le.PutUint32(sqe[sqeOff:], cmdOp)
	le.PutUint64(sqe[sqeUserData:], userData)
	return sqe[sqeCmd:]
}

// prepPollAdd fills a one-shot IORING_OP_POLL_ADD for POLLIN on fd.
func prepPollAdd(sqe []byte, fd int, userData uint64) {
	sqe[sqeOpcode] = opPollAdd
	le.PutUint32(sqe[sqeFd:], uint32(int32(fd)))
	le.PutUint32(sqe[sqeOpFlags:], unix.POLLIN)
	le.PutUint64(sqe[sqeUserData:], userData)
}

// prepPollRemove fills an IORING_OP_POLL_REMOVE of the poll whose
// user_data is target. The removed poll completes with -ECANCELED (or has
// completed already: then the remove fails with -ENOENT).
func prepPollRemove(sqe []byte, target, userData uint64) {
	sqe[sqeOpcode] = opPollRem
	le.PutUint32(sqe[sqeFd:], ^uint32(0)) // -1, as liburing
	le.PutUint64(sqe[sqeAddr:], target)
	le.PutUint64(sqe[sqeUserData:], userData)
}

// prepNop fills an IORING_OP_NOP.
func prepNop(sqe []byte, userData uint64) {
	sqe[sqeOpcode] = opNop
	le.PutUint64(sqe[sqeUserData:], userData)
}
