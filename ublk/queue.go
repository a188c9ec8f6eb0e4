package ublk

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/internal/rawwait"
)

// completion is a served request waiting for its COMMIT_AND_FETCH.
type completion struct {
	tag int
	res int32
}

// queue serves one hardware queue. Its loop goroutine is locked to an OS
// thread for its whole life: ublk_drv binds the queue to the task that sent
// the first FETCH_REQ, every later command must come from that task, and the
// driver's completions run as task work on it. When the loop returns the
// thread exits with it (it is never unlocked), which is what the driver
// watches for when a server goes away.
//
// The loop starts reads and writes itself, through the backend's
// blockdev.Async (an initiator.LUN starts its SCSI command right there,
// on this thread); their ends come back through IODone, which appends
// them to done, and the loop then sends COMMIT_AND_FETCH_REQ. When the
// backend lets the loop reap its completions (blockdev.Reaping, reap.go)
// IODone runs on the loop itself, in Reap, when the reaper's descriptor
// fired in the ring; otherwise on the backend's completion goroutine,
// which wakes the loop through the eventfd (once per batch). A backend
// without blockdev.Async, and FLUSH, DISCARD and WRITE_ZEROES, are served
// on a goroutine per request.
type queue struct {
	id      int
	depth   int
	charFd  int
	b       Backend
	async   blockdev.Async // nil: b's blocking calls on goroutines
	batcher blockdev.Batcher
	ctx     context.Context // for blocking backend calls
	st      *stats
	maxXfer int
	// readOnly: writes, discards and write-zeroes end with EROFS here,
	// never reaching the backend (the block layer lets some through to a
	// read-only disk).
	readOnly bool
	// batch: the device has UBLK_F_BATCH_IO: tags come and go through the
	// batch commands (batch.go), not one FETCH/COMMIT per request.
	batch bool
	bt    batchState
	// noDefer: a batch queue's ring without IORING_SETUP_DEFER_TASKRUN.
	noDefer bool
	bufs    *ioBuffers
	descs   []byte // the driver's descriptor array, mapped read-only
	efd     int
	// reqLen and reqWrite describe the read or write each tag started
	// (written by the loop before the start, read by IODone).
	reqLen   []int32
	reqWrite []bool

	reap reapState // the loop's hold on the backend's completions

	mu      sync.Mutex
	done    []completion
	spare   []completion // the loop's list, swapped with done
	reaping bool         // the loop is in Reap: IODone need not wake it

	quit     atomic.Bool
	workers  sync.WaitGroup // backend calls in flight
	ready    chan error     // the loop's setup result, once
	giveUp   chan struct{}  // closed (by abandon) when a quitting loop stops waiting for backend calls
	giveOnce sync.Once
	exited   chan struct{} // closed when the loop has ended and its ring is closed
	idle     chan struct{} // closed when every backend call has returned, after exited
	relOnce  sync.Once
	err      error // why the loop ended abnormally; read after exited
}

// quietPeriod is how long a quitting loop waits with no new request from
// the driver before it closes its ring (see drainState).
const quietPeriod = 200 * time.Millisecond

// drainState is what a loop decides its end on.
type drainState struct {
	quit        bool      // asked to stop
	gaveUp      bool      // the stop deadline passed: backend calls are abandoned
	outstanding int       // FETCH commands the driver holds
	inflight    int       // backend calls running
	lastRequest time.Time // when the driver last handed us a request
}

// ended reports whether the loop may close its ring at now. Without quit it
// ends only when the driver has aborted every tag (the device was stopped).
// A quitting loop first lets the backend calls in flight return (their
// results are dropped: no COMMIT, a recovering server gets the requests
// again), until the deadline; and it holds, without serving, every request
// the driver still hands it until none came for quietPeriod, or it holds
// every tag: closing the ring cancels the FETCHes still in the driver, and
// ublk_drv before Linux 6.15 (fixed upstream by "ublk: fix race between
// io_uring_cmd_complete_in_task and ublk_cancel_cmd") can complete a FETCH
// twice, and crash, when a request is being dispatched to it just then.
// Every held request uses up a tag, so under any load the driver soon has
// nothing more to dispatch.
func (s drainState) ended(now time.Time) bool {
	if s.outstanding == 0 && s.inflight == 0 {
		return true
	}
	if !s.quit {
		return false
	}
	if s.gaveUp {
		return true
	}
	return s.inflight == 0 && (s.outstanding == 0 || now.Sub(s.lastRequest) >= quietPeriod)
}

// rawWait reports whether the loop should wait in a raw system call at
// now (ring.rawWait): while serving, not while stopping, and not once
// idle for rawwait.Idle (the monitor would preempt the wait every 10 ms).
func (s drainState) rawWait(now time.Time) bool {
	return !s.quit && now.Sub(s.lastRequest) < rawwait.Idle
}

func newQueue(id, depth, charFd, pageSize int, b Backend, bufs *ioBuffers) (*queue, error) {
	off := int64(cmdBufOffset + id*cmdBufMaxSize(pageSize))
	descs, err := unix.Mmap(charFd, off, cmdBufSize(depth, pageSize), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ublk: mmap queue %d descriptors: %w", id, err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Munmap(descs)
		return nil, fmt.Errorf("ublk: queue %d eventfd: %w", id, err)
	}
	q := &queue{id: id, depth: depth, charFd: charFd, b: b, bufs: bufs, descs: descs, efd: efd,
		reqLen: make([]int32, depth), reqWrite: make([]bool, depth),
		done: make([]completion, 0, depth), spare: make([]completion, 0, depth),
		ready: make(chan error, 1), giveUp: make(chan struct{}), exited: make(chan struct{}),
		idle: make(chan struct{})}
	q.async, _ = blockdev.As[blockdev.Async](b)
	q.batcher, _ = blockdev.As[blockdev.Batcher](b)
	q.reap.src, _ = blockdev.As[blockdev.Reaping](b)
	q.reap.wake = q.wake
	return q, nil
}

// release frees what the queue holds once its loop has exited: the
// descriptor mapping now; the eventfd and the I/O buffers only when every
// backend call has returned (idle), since an abandoned call may still
// write into its buffer and then signal the eventfd: closed earlier, its
// number could belong to another file by then. It does not wait for that.
// Idempotent: each resource is let go exactly once.
func (q *queue) release() {
	q.relOnce.Do(func() {
		if q.descs != nil {
			_ = unix.Munmap(q.descs)
			q.descs = nil
		}
		go func() {
			<-q.idle
			_ = unix.Close(q.efd)
			q.bufs.free()
		}()
	})
}

// stop asks the loop to end (see drainState): the FETCHes still in the
// kernel are cancelled with the ring.
func (q *queue) stop() {
	q.quit.Store(true)
	q.wake()
}

// abandon makes a stopping loop end without waiting for the backend calls
// in flight any longer; the caller cancels them.
func (q *queue) abandon() {
	q.giveOnce.Do(func() { close(q.giveUp) })
	q.wake()
}

func (q *queue) gaveUp() bool {
	select {
	case <-q.giveUp:
		return true
	default:
		return false
	}
}

func (q *queue) wake() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(q.efd, one[:])
}

func (q *queue) fail(err error) {
	if q.err == nil {
		q.err = err
	}
}

// watchIdle closes idle once every backend call has returned; the loop
// calls it as it ends (no worker is added after that). Backend calls may
// outlive the loop when they were abandoned.
func (q *queue) watchIdle() {
	go func() {
		q.workers.Wait()
		close(q.idle)
	}()
}

// run is the queue's goroutine (see queue).
func (q *queue) run() {
	runtime.LockOSThread() // never unlocked: the thread ends with the loop
	defer q.watchIdle()
	defer close(q.exited)

	// depth commands, the eventfd poll, and the reaper's polls and
	// removes fit (reap.go submits early should they not).
	// DEFER_TASKRUN with batch I/O only: there it took QD1 from 1812 to
	// 2926 IOPS on the lab's 7.2 floor (docs/fastpath.md); with one
	// command per request it gained nothing on 6.12 and may cost at QD32.
	r, err := newRingFlags(uint32(q.depth+4), false, q.batch && !q.noDefer)
	if err != nil {
		q.ready <- fmt.Errorf("ublk queue %d: %w", q.id, err)
		return
	}
	defer r.close()
	defer q.bt.free(r) // before the ring closes: the buffer group is its
	var raw rawwait.Slot
	defer rawwait.Process.Give(&raw)
	defer q.reap.letGo() // before the ring closes: Release stops revoked calls

	if q.batch {
		if err := q.batchSetup(r); err != nil {
			q.ready <- fmt.Errorf("ublk queue %d: %w", q.id, err)
			return
		}
	} else {
		for tag := 0; tag < q.depth; tag++ {
			q.prepCmd(r, uIOFetchReq, tag, 0)
		}
	}
	prepPollAdd(r.sqe(), q.efd, pollTag)
	if err := r.enter(0, 0); err != nil {
		q.ready <- fmt.Errorf("ublk queue %d FETCH: %w", q.id, err)
		return
	}
	// A FETCH the driver refuses completes at once (a batch FETCH without
	// IORING_CQE_F_MORE); the loop takes whatever else came.
	if e, ok := r.peek(); ok && e.UserData != pollTag && e.Res < 0 && (!q.batch || e.Flags&cqeFMore == 0) {
		what := fmt.Sprintf("FETCH_REQ tag %d", e.UserData)
		if q.batch {
			what = "FETCH_IO_CMDS"
		}
		q.ready <- fmt.Errorf("ublk queue %d %s: %w", q.id, what, syscall.Errno(-e.Res))
		return
	}
	q.ready <- nil

	s := drainState{outstanding: q.depth}
	if q.reap.take(r) {
		q.reapNow(r, &s)
	}
	for {
		if !s.quit && q.quit.Load() {
			s.lastRequest = time.Now() // a dispatch may be under way: wait a quiet period
		}
		s.quit, s.gaveUp = q.quit.Load(), q.gaveUp()
		now := time.Now()
		if s.quit {
			q.reap.drop(r) // ends come through the backend again, as a stop expects
		}
		if s.rawWait(now) {
			rawwait.Process.Take(&raw)
		} else {
			rawwait.Process.Give(&raw)
		}
		r.rawWait = raw.Held()
		if q.batch {
			q.flushCommits(r, &s)
		}
		if s.ended(now) {
			return // the deferred ring close runs on this thread
		}
		// Submit the commits and the poll prepared below, wait for more;
		// a quitting loop wakes up to look at the time.
		wait := time.Duration(0)
		if s.quit {
			wait = quietPeriod / 4
		}
		// A COMMIT_IO_CMDS completes while it is submitted: wait for one
		// event beyond those, or the wait would end at once on them.
		want := uint32(1)
		if q.batch {
			want += uint32(q.bt.fresh)
			q.bt.fresh = 0
		}
		if err := r.enter(want, wait); err != nil {
			q.fail(fmt.Errorf("ublk queue %d: %w", q.id, err))
			q.quit.Store(true)
			return // backend calls in flight finish on their own (idle)
		}
		// The reads and writes started in this pass are posted together.
		var batch blockdev.Batch
		if q.batcher != nil {
			batch = q.batcher.BeginBatch()
		}
		for {
			e, ok := r.peek()
			if !ok {
				break
			}
			r.advance()
			switch e.UserData & kindMask {
			case pollTag:
				var buf [8]byte
				_, _ = unix.Read(q.efd, buf[:])
				if q.reap.revoked.Swap(false) {
					q.reap.drop(r)
				}
				q.commitDone(r, &s)
				// The backend completed: maybe on a new connection.
				if !s.quit && q.reap.take(r) {
					q.reapNow(r, &s)
				}
				prepPollAdd(r.sqeSubmitting(), q.efd, pollTag)
				continue
			case reapTag:
				if !q.reap.fired(e.UserData) {
					continue // a poll removed, or of a reaper let go
				}
				if e.Res < 0 {
					// The poll itself failed: stop reaping (the backend's
					// goroutine completes); the next eventfd wake asks again.
					q.reap.drop(r)
					continue
				}
				q.reapNow(r, &s)
				continue
			case removeTag, prepTag:
				continue
			case fetchTag:
				q.onFetch(r, e, &s)
				continue
			case commitTag:
				q.onCommit(e)
				continue
			}
			s.outstanding--
			tag := int(e.UserData)
			switch {
			case e.Res == ioResOK && q.quit.Load():
				// Held, not served: a recovering server gets it again.
				s.lastRequest = time.Now()
			case e.Res == ioResOK:
				s.lastRequest = time.Now()
				var d ioDesc
				d.unmarshal(q.descs[tag*sizeofIODesc:])
				s.inflight++
				q.workers.Add(1)
				q.start(tag, d)
			case e.Res == ioResAbort:
				// the driver is done with this tag
			default:
				q.fail(fmt.Errorf("ublk queue %d tag %d: %w", q.id, tag, syscall.Errno(-e.Res)))
			}
		}
		if q.batcher != nil {
			q.batcher.EndBatch(batch)
		}
	}
}

// reapNow runs the held reaper's completions on the loop, then polls its
// descriptor again (unless still polled), or drops it when it has ended
// or the loop is stopping; the requests it ended are committed.
func (q *queue) reapNow(r *ring, s *drainState) {
	q.mu.Lock()
	q.reaping = true
	q.mu.Unlock()
	live := q.reap.rp.Reap()
	q.mu.Lock()
	q.reaping = false
	q.mu.Unlock()
	switch {
	case !live || s.quit:
		q.reap.drop(r)
	case !q.reap.armed:
		q.reap.arm(r)
	}
	q.commitDone(r, s)
}

// commitDone takes the requests served since the last look and queues
// their COMMIT_AND_FETCH_REQs.
func (q *queue) commitDone(r *ring, s *drainState) {
	q.mu.Lock()
	done := q.done
	q.done = q.spare[:0]
	q.mu.Unlock()
	q.spare = done
	if q.batch {
		q.commitBatch(done, s)
		return
	}
	for _, c := range done {
		s.inflight--
		if q.quit.Load() {
			continue // no commit: a recovering server reissues it
		}
		q.prepCmd(r, uIOCommitAndFetchReq, c.tag, c.res)
		s.outstanding++
	}
}

// prepCmd queues a FETCH_REQ or COMMIT_AND_FETCH_REQ for tag. The SQ has
// depth+4 entries and at most depth commands plus the loop's few polls
// (see run) are ever queued unsubmitted, so an SQE is always free.
func (q *queue) prepCmd(r *ring, op uint32, tag int, res int32) {
	sqe := r.sqe()
	cmd := ioCmd{QID: uint16(q.id), Tag: uint16(tag), Result: res, Addr: uint64(uintptrOf(q.bufs.bufs[tag]))}
	cmd.marshal(prepURingCmd(sqe, q.charFd, op, uint64(tag)))
}

// start serves the request the driver handed over at tag: a read or
// write through the backend's blockdev.Async, anything else on a
// goroutine. Its end comes to complete.
func (q *queue) start(tag int, d ioDesc) {
	buf := q.bufs.bufs[tag]
	op := d.op()
	if q.readOnly && isWrite(op) {
		q.st.errors.Add(1)
		q.complete(tag, -int32(syscall.EROFS))
		return
	}
	if q.async == nil || op != ioOpRead && op != ioOpWrite {
		go q.work(tag, d)
		return
	}
	off := int64(d.StartSector) << 9
	n := int64(d.NrSectors) << 9
	if n > int64(len(buf)) || n == 0 {
		q.IODone(uint32(tag), fmt.Errorf("ublk: %d-byte request for a %d-byte buffer: %w", n, len(buf), syscall.EINVAL))
		return
	}
	q.reqLen[tag], q.reqWrite[tag] = int32(n), op == ioOpWrite
	if op == ioOpWrite {
		q.async.StartWrite(buf[:n], off, d.flags()&ioFlagFUA != 0, q, uint32(tag))
	} else {
		q.async.StartRead(buf[:n], off, q, uint32(tag))
	}
}

// isWrite reports an operation that changes the disk.
func isWrite(op uint8) bool {
	return op == ioOpWrite || op == ioOpDiscard || op == ioOpWriteSame || op == ioOpWriteZeroes
}

// IODone implements blockdev.Done: a read or write started by start ended.
func (q *queue) IODone(tag uint32, err error) {
	res := q.reqLen[tag]
	if err == nil {
		q.st.done(q.reqWrite[tag], int64(res))
	} else {
		q.st.errors.Add(1)
		res = blockErrno(err)
	}
	q.complete(int(tag), res)
}

// work serves one request with the backend's blocking calls.
func (q *queue) work(tag int, d ioDesc) {
	var res int32
	if !q.quit.Load() { // once stopping, queued requests are only handed back
		res = serve(q.ctx, q.b, request{desc: d, buf: q.bufs.bufs[tag]}, q.maxXfer, q.st)
	}
	q.complete(tag, res)
}

// complete hands a served request to the loop for its COMMIT.
func (q *queue) complete(tag int, res int32) {
	q.mu.Lock()
	q.done = append(q.done, completion{tag: tag, res: res})
	first := len(q.done) == 1 && !q.reaping
	q.mu.Unlock()
	// Only the first completion since the loop took the list wakes it: the
	// rest ride along (one eventfd write per batch, not per request). None
	// does while the loop reaps: it takes the list when Reap returns.
	if first {
		q.wake()
	}
	q.workers.Done() // last: once none is running, release closes the eventfd
}
