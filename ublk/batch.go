package ublk

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UBLK_F_BATCH_IO (Linux 7.0): a queue's commands carry many tags at once
// instead of one FETCH_REQ / COMMIT_AND_FETCH_REQ per request.
//
//   - PREP_IO_CMDS, once per queue before START_DEV (and after
//     START_USER_RECOVERY): every tag with its buffer; the driver counts the
//     queue ready. All or nothing; it completes at once with 0 or an errno.
//   - FETCH_IO_CMDS, multishot, fed by a provided-buffer ring (pbuf.go):
//     each completion is one buffer filled with the u16 tags of the
//     requests the driver hands over (up to 128), their descriptors
//     written and write data copied into the tags' buffers, as after a
//     FETCH_REQ. Two are armed: the driver serves from one and, when it
//     cancels the queue (STOP_DEV, a quiesce), ends the waiting one with
//     UBLK_IO_RES_ABORT: that is how the loop learns the driver is done
//     (the one in use ends only with the ring). One that ends otherwise
//     (ENOBUFS: no free buffer) is armed again.
//   - COMMIT_IO_CMDS: the results of every request served since the loop
//     last looked, each with the buffer for its tag's next request, in one
//     command; its result is the bytes of the elements the driver took.
//
// There is no task affinity in batch mode (any thread may send any of
// them); the queue keeps its one locked loop anyway, which starts and
// completes the I/O.

// I/O commands of batch mode: _IOWR('u', nr, struct ublk_batch_io).
const (
	ioPrepIOCmds   = 0x25
	ioCommitIOCmds = 0x26
	ioFetchIOCmds  = 0x27

	sizeofBatchIO   = 16 // struct ublk_batch_io
	sizeofBatchElem = 16 // struct ublk_elem_header and buf_addr
	batchHasBufAddr = 1 << 1

	// maxFetchTags is the most tags one FETCH completion carries
	// (the driver's MAX_NR_TAG): its buffers are that big.
	maxFetchTags   = 128
	fetchBufs      = 32 // provided buffers per queue (a power of two)
	fetchCmds      = 2  // FETCH_IO_CMDS armed per queue
	commitBufs     = 4  // COMMIT element buffers per queue
	fetchBufferGID = 0  // the buffer group of a queue's ring
)

var (
	uIOPrepIOCmds   = iowr(ublkIOCType, ioPrepIOCmds, sizeofBatchIO)
	uIOCommitIOCmds = iowr(ublkIOCType, ioCommitIOCmds, sizeofBatchIO)
	uIOFetchIOCmds  = iowr(ublkIOCType, ioFetchIOCmds, sizeofBatchIO)
)

// user_data kinds of batch mode's commands (beside reap.go's).
const (
	fetchTag  = 4 << 32 // a FETCH_IO_CMDS; the low bits are its slot
	commitTag = 5 << 32 // a COMMIT_IO_CMDS; the low bits are its buffer
	prepTag   = 6 << 32 // the PREP_IO_CMDS
)

// batchIO is struct ublk_batch_io, in the SQE's command area.
type batchIO struct {
	QID       uint16
	Flags     uint16
	NrElem    uint16
	ElemBytes uint8
}

func (b *batchIO) marshal(p []byte) {
	_ = p[sizeofBatchIO-1]
	le.PutUint16(p[0:], b.QID)
	le.PutUint16(p[2:], b.Flags)
	le.PutUint16(p[4:], b.NrElem)
	p[6] = b.ElemBytes
	p[7] = 0
	le.PutUint64(p[8:], 0)
}

// putElem writes element i of a PREP or COMMIT buffer: struct
// ublk_elem_header (tag, buf_index, result) and buf_addr.
func putElem(p []byte, i int, tag uint16, res int32, addr uint64) {
	e := p[i*sizeofBatchElem : (i+1)*sizeofBatchElem]
	le.PutUint16(e[0:], tag)
	le.PutUint16(e[2:], 0)
	le.PutUint32(e[4:], uint32(res))
	le.PutUint64(e[8:], addr)
}

// batchState is a batch-mode queue's own: its buffer ring of fetched tags,
// and the element buffers of its PREP and COMMITs (in one anonymous
// mapping: the driver reads them during the command, which completes
// before the loop reuses them). Owned by the queue loop.
type batchState struct {
	tags    *bufRing
	elems   []byte // (1 + commitBufs) * depth elements: PREP's, then each COMMIT's
	depth   int
	busy    [commitBufs]bool // a COMMIT of that buffer awaits its completion
	sent    [commitBufs]int  // its element count
	backlog []completion     // served, not yet in a COMMIT (every buffer busy)
	armed   int              // FETCH_IO_CMDS in the driver
	fresh   int              // COMMITs prepared since the loop last entered the ring
	aborted bool             // a FETCH ended with UBLK_IO_RES_ABORT: the driver is done
}

func (bs *batchState) prepBuf() []byte { return bs.elems[:bs.depth*sizeofBatchElem] }

func (bs *batchState) commitBuf(i int) []byte {
	n := bs.depth * sizeofBatchElem
	return bs.elems[(1+i)*n : (2+i)*n]
}

func (bs *batchState) free(r *ring) {
	bs.tags.unregister(r)
	bs.tags = nil
	if bs.elems != nil {
		_ = unix.Munmap(bs.elems)
		bs.elems = nil
	}
}

// batchSetup prepares every tag of the queue (PREP_IO_CMDS, waiting for its
// completion, at most 10 s) and arms the FETCH_IO_CMDS. The driver counts
// the queue ready with the PREP; it lets FETCHes in only after it.
func (q *queue) batchSetup(r *ring) error {
	bs := &q.bt
	bs.depth = q.depth
	var err error
	bs.elems, err = unix.Mmap(-1, 0, roundUp((1+commitBufs)*q.depth*sizeofBatchElem, unix.Getpagesize()),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("batch element buffers: mmap: %w", err)
	}
	bs.tags, err = r.registerBufRing(fetchBufferGID, fetchBufs, 2*maxFetchTags)
	if err != nil {
		return err
	}
	prep := bs.prepBuf()
	for tag := 0; tag < q.depth; tag++ {
		putElem(prep, tag, uint16(tag), 0, uint64(uintptrOf(q.bufs.bufs[tag])))
	}
	q.prepBatchCmd(r.sqe(), uIOPrepIOCmds, prepTag, prep, q.depth)
	if err := r.enter(0, 0); err != nil {
		return fmt.Errorf("PREP_IO_CMDS: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, ok := r.peek()
		if !ok {
			if time.Now().After(deadline) {
				return fmt.Errorf("PREP_IO_CMDS: no completion in 10 s")
			}
			if err := r.enter(1, 100*time.Millisecond); err != nil {
				return fmt.Errorf("PREP_IO_CMDS: %w", err)
			}
			continue
		}
		r.advance()
		if e.UserData != prepTag {
			continue
		}
		if e.Res < 0 {
			return fmt.Errorf("PREP_IO_CMDS: %w", syscall.Errno(-e.Res))
		}
		break
	}
	for slot := 0; slot < fetchCmds; slot++ {
		q.armFetch(r, slot)
	}
	return nil
}

// prepBatchCmd fills a PREP_IO_CMDS or COMMIT_IO_CMDS of n elements.
func (q *queue) prepBatchCmd(sqe []byte, op uint32, userData uint64, elems []byte, n int) {
	le.PutUint64(sqe[sqeAddr:], uint64(uintptr(unsafe.Pointer(&elems[0]))))
	le.PutUint32(sqe[sqeLen:], uint32(n*sizeofBatchElem))
	h := batchIO{QID: uint16(q.id), Flags: batchHasBufAddr, NrElem: uint16(n), ElemBytes: sizeofBatchElem}
	h.marshal(prepURingCmd(sqe, q.charFd, op, userData))
}

// armFetch queues a multishot FETCH_IO_CMDS taking its buffers from the
// queue's group.
func (q *queue) armFetch(r *ring, slot int) {
	sqe := r.sqeSubmitting()
	h := batchIO{QID: uint16(q.id), NrElem: maxFetchTags, ElemBytes: 2}
	h.marshal(prepURingCmd(sqe, q.charFd, uIOFetchIOCmds, fetchTag|uint64(slot)))
	sqe[sqeFlags] |= sqeFlagBufferSelect
	le.PutUint32(sqe[sqeOpFlags:], uringCmdMultishot)
	le.PutUint16(sqe[sqeBufIndex:], fetchBufferGID)
	q.bt.armed++
}

// onFetch takes a FETCH_IO_CMDS completion: the tags in its buffer are
// served (or, once quitting, held) as a FETCH_REQ's completion would be;
// the buffer goes back to the kernel. A FETCH that ended is armed again,
// but after UBLK_IO_RES_ABORT (the driver cancelled the queue) or while
// quitting.
func (q *queue) onFetch(r *ring, e cqe, s *drainState) {
	bs := &q.bt
	if e.Flags&cqeFBuffer != 0 {
		bid := uint16(e.Flags >> cqeBufferShift)
		if e.Res > 0 {
			b := bs.tags.buf(bid)
			n := min(int(e.Res)/2, len(b)/2)
			for i := 0; i < n; i++ {
				q.delivered(int(le.Uint16(b[2*i:])), s)
			}
		}
		bs.tags.give(bid)
	}
	if e.Flags&cqeFMore != 0 {
		return
	}
	bs.armed--
	switch {
	case e.Res == ioResAbort:
		bs.aborted = true
		s.outstanding = 0 // the driver has let go of every tag it held
	case e.Res < 0 && e.Res != -int32(syscall.ENOBUFS):
		q.fail(fmt.Errorf("ublk queue %d FETCH_IO_CMDS: %w", q.id, syscall.Errno(-e.Res)))
		fallthrough
	default:
		if !s.quit && !bs.aborted {
			q.armFetch(r, int(e.UserData&^kindMask))
		}
	}
}

// delivered is one request the driver handed over at tag: started, or
// held once quitting (not committed: a recovering server gets it again).
func (q *queue) delivered(tag int, s *drainState) {
	if tag >= q.depth {
		q.fail(fmt.Errorf("ublk queue %d: the driver handed over tag %d of %d", q.id, tag, q.depth))
		return
	}
	if !q.bt.aborted {
		s.outstanding--
	}
	s.lastRequest = time.Now()
	if q.quit.Load() {
		return
	}
	var d ioDesc
	d.unmarshal(q.descs[tag*sizeofIODesc:])
	s.inflight++
	q.workers.Add(1)
	q.start(tag, d)
}

// commitBatch queues the served requests' results for the next COMMIT.
func (q *queue) commitBatch(done []completion, s *drainState) {
	for _, c := range done {
		s.inflight--
		if q.quit.Load() {
			continue // no commit: a recovering server reissues it
		}
		q.bt.backlog = append(q.bt.backlog, c)
	}
}

// flushCommits sends the queued results in COMMIT_IO_CMDS, depth at most in
// each, while a buffer is free (the loop calls it before it enters the
// ring). Each request committed is a tag the driver holds again.
func (q *queue) flushCommits(r *ring, s *drainState) {
	bs := &q.bt
	for len(bs.backlog) > 0 {
		i := -1
		for j := range bs.busy {
			if !bs.busy[j] {
				i = j
				break
			}
		}
		if i < 0 {
			return // the busy ones' completions wake the loop
		}
		n := min(len(bs.backlog), bs.depth)
		buf := bs.commitBuf(i)
		for k, c := range bs.backlog[:n] {
			putElem(buf, k, uint16(c.tag), c.res, uint64(uintptrOf(q.bufs.bufs[c.tag])))
		}
		q.prepBatchCmd(r.sqeSubmitting(), uIOCommitIOCmds, commitTag|uint64(i), buf, n)
		bs.busy[i], bs.sent[i] = true, n
		bs.fresh++
		if !bs.aborted {
			s.outstanding += n
		}
		bs.backlog = append(bs.backlog[:0], bs.backlog[n:]...)
	}
}

// onCommit takes a COMMIT_IO_CMDS completion: its buffer is free again; a
// result short of every element means the driver refused the rest.
func (q *queue) onCommit(e cqe) {
	bs := &q.bt
	i := int(e.UserData &^ kindMask)
	if i >= commitBufs {
		return
	}
	n := bs.sent[i]
	bs.busy[i], bs.sent[i] = false, 0
	if want := int32(n * sizeofBatchElem); e.Res != want && !bs.aborted {
		err := fmt.Errorf("ublk queue %d COMMIT_IO_CMDS: %d of %d bytes taken", q.id, max(e.Res, 0), want)
		if e.Res < 0 {
			err = fmt.Errorf("ublk queue %d COMMIT_IO_CMDS of %d: %w", q.id, n, syscall.Errno(-e.Res))
		}
		q.fail(err)
	}
}
