package ublk

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// pollTag is the user_data of the eventfd poll; I/O commands carry their tag.
const pollTag = 1 << 32

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
// Requests are served by one goroutine each (at most depth at a time), owned
// by the queue through workers; they hand results back through done and the
// eventfd, and the loop sends COMMIT_AND_FETCH_REQ.
type queue struct {
	id      int
	depth   int
	charFd  int
	b       Backend
	ctx     context.Context // for backend calls
	st      *stats
	maxXfer int
	bufs    *ioBuffers
	descs   []byte // the driver's descriptor array, mapped read-only
	efd     int

	mu   sync.Mutex
	done []completion

	quit    atomic.Bool
	workers sync.WaitGroup
	// jobs feeds depth long-lived workers: a goroutine per request would
	// grow a fresh stack through the whole backend call chain every time.
	jobs   chan job
	ready  chan error    // the loop's setup result, once
	exited chan struct{} // closed when the loop (and every worker) is done
	err    error         // why the loop ended abnormally; read after exited
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
	return &queue{id: id, depth: depth, charFd: charFd, b: b, bufs: bufs, descs: descs, efd: efd,
		ready: make(chan error, 1), exited: make(chan struct{})}, nil
}

// release frees what the queue holds, after its loop has exited.
func (q *queue) release() {
	if q.descs != nil {
		_ = unix.Munmap(q.descs)
		q.descs = nil
	}
	if q.efd >= 0 {
		_ = unix.Close(q.efd)
		q.efd = -1
	}
	q.bufs.free()
}

// stop asks the loop to end without waiting for the driver: the FETCHes
// still in the kernel are cancelled with the ring.
func (q *queue) stop() {
	q.quit.Store(true)
	q.wake()
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

// run is the queue's goroutine (see queue).
func (q *queue) run() {
	runtime.LockOSThread() // never unlocked: the thread ends with the loop
	defer close(q.exited)
	defer q.workers.Wait()

	r, err := newRing(uint32(q.depth+1), false)
	if err != nil {
		q.ready <- fmt.Errorf("ublk queue %d: %w", q.id, err)
		return
	}
	defer r.close()

	for tag := 0; tag < q.depth; tag++ {
		q.prepCmd(r, uIOFetchReq, tag, 0)
	}
	prepPollAdd(r.sqe(), q.efd, pollTag)
	if err := r.enter(0, 0); err != nil {
		q.ready <- fmt.Errorf("ublk queue %d FETCH_REQ: %w", q.id, err)
		return
	}
	// A FETCH the driver refuses completes at once.
	if e, ok := r.peek(); ok && e.UserData != pollTag && e.Res < 0 {
		q.ready <- fmt.Errorf("ublk queue %d FETCH_REQ tag %d: %w", q.id, e.UserData, syscall.Errno(-e.Res))
		return
	}
	q.jobs = make(chan job, q.depth) // never blocks: at most depth in flight
	for i := 0; i < q.depth; i++ {
		go q.worker()
	}
	defer close(q.jobs) // runs before workers.Wait: the workers drain and exit
	q.ready <- nil

	outstanding, inflight := q.depth, 0
	for {
		if q.quit.Load() && inflight == 0 {
			return
		}
		if outstanding == 0 && inflight == 0 {
			return // every tag aborted: the device was stopped
		}
		// Submit the commits and the poll prepared below, wait for more.
		if err := r.enter(1, 0); err != nil {
			q.fail(fmt.Errorf("ublk queue %d: %w", q.id, err))
			q.quit.Store(true)
			return // the deferred Wait lets the workers finish
		}
		for {
			e, ok := r.peek()
			if !ok {
				break
			}
			r.advance()
			if e.UserData == pollTag {
				var buf [8]byte
				_, _ = unix.Read(q.efd, buf[:])
				q.mu.Lock()
				done := q.done
				q.done = nil
				q.mu.Unlock()
				for _, c := range done {
					inflight--
					if q.quit.Load() {
						continue // no commit: a recovering server reissues it
					}
					q.prepCmd(r, uIOCommitAndFetchReq, c.tag, c.res)
					outstanding++
				}
				prepPollAdd(r.sqe(), q.efd, pollTag)
				continue
			}
			outstanding--
			tag := int(e.UserData)
			switch {
			case e.Res == ioResOK:
				var d ioDesc
				d.unmarshal(q.descs[tag*sizeofIODesc:])
				inflight++
				q.workers.Add(1)
				q.jobs <- job{tag: tag, d: d}
			case e.Res == ioResAbort:
				// the driver is done with this tag
			default:
				q.fail(fmt.Errorf("ublk queue %d tag %d: %w", q.id, tag, syscall.Errno(-e.Res)))
			}
		}
	}
}

// prepCmd queues a FETCH_REQ or COMMIT_AND_FETCH_REQ for tag. The SQ has
// depth+1 entries and at most depth commands plus the poll are ever queued
// unsubmitted, so an SQE is always free.
func (q *queue) prepCmd(r *ring, op uint32, tag int, res int32) {
	sqe := r.sqe()
	cmd := ioCmd{QID: uint16(q.id), Tag: uint16(tag), Result: res, Addr: uint64(uintptrOf(q.bufs.bufs[tag]))}
	cmd.marshal(prepURingCmd(sqe, q.charFd, op, uint64(tag)))
}

type job struct {
	tag int
	d   ioDesc
}

// worker serves requests until the queue loop closes q.jobs.
func (q *queue) worker() {
	for j := range q.jobs {
		q.work(j.tag, j.d)
	}
}

func (q *queue) work(tag int, d ioDesc) {
	defer q.workers.Done()
	res := serve(q.ctx, q.b, request{desc: d, buf: q.bufs.bufs[tag]}, q.maxXfer, q.st)
	q.mu.Lock()
	q.done = append(q.done, completion{tag: tag, res: res})
	first := len(q.done) == 1
	q.mu.Unlock()
	// Only the first completion since the loop took the list wakes it: the
	// rest ride along (one eventfd write per batch, not per request).
	if first {
		q.wake()
	}
}
