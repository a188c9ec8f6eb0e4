package ublk

import (
	"fmt"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The batch commands' numbers are the kernel's _IOWR('u', 0x25..0x27,
// struct ublk_batch_io) (include/uapi/linux/ublk_cmd.h, Linux 7.0).
func TestBatchOpcodes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint32
	}{
		{"UBLK_U_IO_PREP_IO_CMDS", uIOPrepIOCmds, 0xc0107525},
		{"UBLK_U_IO_COMMIT_IO_CMDS", uIOCommitIOCmds, 0xc0107526},
		{"UBLK_U_IO_FETCH_IO_CMDS", uIOFetchIOCmds, 0xc0107527},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func TestBatchHeaderAndElement(t *testing.T) {
	b := make([]byte, sizeofBatchIO)
	for i := range b {
		b[i] = 0xff
	}
	(&batchIO{QID: 3, Flags: batchHasBufAddr, NrElem: 0x102, ElemBytes: 16}).marshal(b)
	want := []byte{3, 0, 2, 0, 2, 1, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if string(b) != string(want) {
		t.Errorf("ublk_batch_io % x, want % x", b, want)
	}
	e := make([]byte, 2*sizeofBatchElem)
	putElem(e, 1, 0x0a0b, -5, 0x1122334455667788)
	want = append(make([]byte, 16), 0x0b, 0x0a, 0, 0, 0xfb, 0xff, 0xff, 0xff, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11)
	if string(e) != string(want) {
		t.Errorf("elements % x, want % x", e, want)
	}
}

// A provided-buffer ring on the host's io_uring: pipe reads with
// IOSQE_BUFFER_SELECT take its buffers in order, each completion naming its
// buffer; buffers given back are taken again, across several laps of the
// ring (the tail shares entry 0's word with its bid).
func TestBufRingRecycles(t *testing.T) {
	r, err := newRing(8, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	br, err := r.registerBufRing(7, 4, 64)
	if err != nil {
		t.Skipf("provided-buffer rings: %v", err)
	}
	defer br.unregister(r)
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	const opRead = 22 // IORING_OP_READ
	// Buffer ids handed out lap after lap: given back out of order, so
	// the ring's entries and their bids do not stay lined up.
	var order []uint16
	for round := 0; round < 12; round++ {
		msg := fmt.Sprintf("message %02d", round)
		if _, err := unix.Write(p[1], []byte(msg)); err != nil {
			t.Fatal(err)
		}
		sqe := r.sqe()
		sqe[sqeOpcode] = opRead
		sqe[sqeFlags] = sqeFlagBufferSelect
		le.PutUint32(sqe[sqeFd:], uint32(p[0]))
		le.PutUint32(sqe[sqeLen:], 64)
		le.PutUint64(sqe[sqeOff:], ^uint64(0)) // the pipe's position
		le.PutUint16(sqe[sqeBufIndex:], 7)
		le.PutUint64(sqe[sqeUserData:], uint64(round))
		if err := r.enter(1, 0); err != nil {
			t.Fatal(err)
		}
		e, ok := r.peek()
		if !ok {
			t.Fatalf("round %d: no completion", round)
		}
		r.advance()
		if e.Res != int32(len(msg)) || e.Flags&cqeFBuffer == 0 {
			t.Fatalf("round %d: %+v (%v), want %d bytes in a buffer", round, e, syscall.Errno(-e.Res), len(msg))
		}
		bid := uint16(e.Flags >> cqeBufferShift)
		if got := string(br.buf(bid)[:e.Res]); got != msg {
			t.Fatalf("round %d: buffer %d holds %q, want %q", round, bid, got, msg)
		}
		order = append(order, bid)
		// Give back two at a time, the later one first.
		if round%2 == 1 {
			br.give(order[len(order)-1])
			br.give(order[len(order)-2])
		}
	}
	seen := map[uint16]int{}
	for _, b := range order {
		seen[b]++
	}
	if len(seen) != 4 {
		t.Errorf("buffers used %v: want all 4 of the group", order)
	}
}

// batchTestQueue is a batch-mode queue on a real ring with no driver
// behind it: what the loop's batch functions do to the ring is looked at,
// never submitted.
func batchTestQueue(t *testing.T, depth int) (*queue, *ring) {
	t.Helper()
	r, err := newRing(uint32(depth+4), false)
	if err != nil {
		t.Fatal(err)
	}
	q := &queue{id: 2, depth: depth, charFd: 99, batch: true, bufs: &ioBuffers{}}
	for i := 0; i < depth; i++ {
		q.bufs.bufs = append(q.bufs.bufs, make([]byte, 4096))
	}
	q.bt.depth = depth
	q.bt.elems, err = unix.Mmap(-1, 0, roundUp((1+commitBufs)*depth*sizeofBatchElem, unix.Getpagesize()),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.bt.free(r); r.close() })
	return q, r
}

// sqeAt is the SQE the ring's i-th preparation got.
func sqeAt(r *ring, i int) []byte { return r.sqeMem[i*r.sqeSize : (i+1)*r.sqeSize] }

// Served requests leave in one COMMIT_IO_CMDS per flush, at most depth
// elements each, every element its tag, result and the tag's buffer; each
// committed tag is the driver's again. With every buffer awaiting its
// completion the rest waits; a completion frees its buffer.
func TestBatchCommits(t *testing.T) {
	const depth = 4
	q, r := batchTestQueue(t, depth)
	s := drainState{outstanding: 0, inflight: 6}
	q.commitBatch([]completion{{0, 4096}, {1, -5}, {2, 512}, {3, 0}, {0, 8}, {1, 16}}, &s)
	if s.inflight != 0 || len(q.bt.backlog) != 6 {
		t.Fatalf("after commitBatch: inflight %d, backlog %d; want 0, 6", s.inflight, len(q.bt.backlog))
	}
	q.flushCommits(r, &s)
	if len(q.bt.backlog) != 0 || s.outstanding != 6 || r.pending() != 2 {
		t.Fatalf("after flush: backlog %d, outstanding %d, SQEs %d; want 0, 6, 2", len(q.bt.backlog), s.outstanding, r.pending())
	}
	if q.bt.fresh != 2 {
		t.Fatalf("after flush: %d fresh commits, want 2 (the loop's wait counts their completions)", q.bt.fresh)
	}
	for i, want := range [][]completion{{{0, 4096}, {1, -5}, {2, 512}, {3, 0}}, {{0, 8}, {1, 16}}} {
		sqe := sqeAt(r, i)
		if sqe[sqeOpcode] != opURingCmd || le.Uint32(sqe[sqeOff:]) != uIOCommitIOCmds || le.Uint32(sqe[sqeFd:]) != 99 {
			t.Fatalf("SQE %d: opcode %d cmd_op %#x fd %d", i, sqe[sqeOpcode], le.Uint32(sqe[sqeOff:]), le.Uint32(sqe[sqeFd:]))
		}
		if ud := le.Uint64(sqe[sqeUserData:]); ud != commitTag|uint64(i) {
			t.Errorf("SQE %d user_data %#x", i, ud)
		}
		h := sqe[sqeCmd:]
		if le.Uint16(h[0:]) != 2 || le.Uint16(h[2:]) != batchHasBufAddr || int(le.Uint16(h[4:])) != len(want) || h[6] != sizeofBatchElem {
			t.Errorf("SQE %d header % x", i, h[:16])
		}
		if int(le.Uint32(sqe[sqeLen:])) != len(want)*sizeofBatchElem {
			t.Errorf("SQE %d len %d", i, le.Uint32(sqe[sqeLen:]))
		}
		elems := q.bt.commitBuf(i)
		if le.Uint64(sqe[sqeAddr:]) != uint64(uintptr(unsafe.Pointer(&elems[0]))) {
			t.Fatalf("SQE %d addr %#x: not commit buffer %d", i, le.Uint64(sqe[sqeAddr:]), i)
		}
		for k, c := range want {
			e := elems[k*sizeofBatchElem:]
			if int(le.Uint16(e[0:])) != c.tag || int32(le.Uint32(e[4:])) != c.res || le.Uint64(e[8:]) != uint64(uintptrOf(q.bufs.bufs[c.tag])) {
				t.Errorf("SQE %d element %d: % x, want tag %d res %d", i, k, e[:16], c.tag, c.res)
			}
		}
	}
	// Every buffer busy: what comes next waits for a completion.
	q.bt.busy = [commitBufs]bool{true, true, true, true}
	q.bt.sent = [commitBufs]int{4, 2, 1, 1}
	q.commitBatch([]completion{{2, 7}}, &s)
	q.flushCommits(r, &s)
	if len(q.bt.backlog) != 1 || r.pending() != 2 {
		t.Fatalf("all busy: backlog %d, SQEs %d; want 1, 2", len(q.bt.backlog), r.pending())
	}
	q.onCommit(cqe{UserData: commitTag | 1, Res: 2 * sizeofBatchElem})
	if q.bt.busy[1] || q.err != nil {
		t.Fatalf("a whole commit's completion: busy %v, err %v", q.bt.busy, q.err)
	}
	q.flushCommits(r, &s)
	if len(q.bt.backlog) != 0 || r.pending() != 3 || le.Uint64(sqeAt(r, 2)[sqeUserData:]) != commitTag|1 {
		t.Fatalf("after a completion: backlog %d, SQEs %d", len(q.bt.backlog), r.pending())
	}
	// A short completion is the driver refusing the rest: an error.
	q.onCommit(cqe{UserData: commitTag | 0, Res: 2 * sizeofBatchElem})
	if q.err == nil {
		t.Fatal("a commit taking 2 of 4 elements: no error")
	}
	// Once quitting nothing is committed: the next server gets those.
	q.err = nil
	q.quit.Store(true)
	s.inflight = 1
	q.commitBatch([]completion{{3, 1}}, &s)
	if s.inflight != 0 || len(q.bt.backlog) != 0 {
		t.Fatalf("quitting: inflight %d, backlog %d", s.inflight, len(q.bt.backlog))
	}
}

// A FETCH_IO_CMDS completion's tags are the requests handed over (held
// here, the loop quitting: not started); its buffer goes back to the
// group. A FETCH that ends is armed again, unless it ended with
// UBLK_IO_RES_ABORT: then the driver holds no tag any more.
func TestBatchFetchCompletions(t *testing.T) {
	const depth = 8
	q, r := batchTestQueue(t, depth)
	br, err := r.registerBufRing(fetchBufferGID, 4, 2*maxFetchTags)
	if err != nil {
		t.Skipf("provided-buffer rings: %v", err)
	}
	q.bt.tags = br
	q.bt.armed = fetchCmds
	tail := br.tail
	q.quit.Store(true)
	s := drainState{outstanding: depth, quit: true}
	b := br.buf(2)
	for i, tag := range []uint16{5, 0, 7} {
		le.PutUint16(b[2*i:], tag)
	}
	q.onFetch(r, cqe{UserData: fetchTag | 1, Res: 6, Flags: cqeFMore | cqeFBuffer | 2<<cqeBufferShift}, &s)
	if s.outstanding != depth-3 || s.inflight != 0 || q.bt.armed != fetchCmds || br.tail != tail+1 || r.pending() != 0 {
		t.Fatalf("3 tags: outstanding %d inflight %d armed %d tail +%d SQEs %d", s.outstanding, s.inflight, q.bt.armed, br.tail-tail, r.pending())
	}
	// Ended for want of a buffer: armed again (not while quitting).
	s.quit = false
	q.onFetch(r, cqe{UserData: fetchTag | 1, Res: -int32(syscall.ENOBUFS)}, &s)
	if q.bt.armed != fetchCmds || r.pending() != 1 || q.err != nil {
		t.Fatalf("ENOBUFS: armed %d SQEs %d err %v", q.bt.armed, r.pending(), q.err)
	}
	sqe := sqeAt(r, 0)
	if le.Uint32(sqe[sqeOff:]) != uIOFetchIOCmds || sqe[sqeFlags]&sqeFlagBufferSelect == 0 ||
		le.Uint32(sqe[sqeOpFlags:]) != uringCmdMultishot || le.Uint16(sqe[sqeBufIndex:]) != fetchBufferGID ||
		le.Uint64(sqe[sqeUserData:]) != fetchTag|1 {
		t.Fatalf("re-armed FETCH: % x", sqe[:48])
	}
	if h := sqe[sqeCmd:]; le.Uint16(h[0:]) != 2 || le.Uint16(h[2:]) != 0 || h[6] != 2 {
		t.Fatalf("FETCH header % x", h[:16])
	}
	// Aborted: the driver is done; not armed again.
	q.onFetch(r, cqe{UserData: fetchTag, Res: ioResAbort}, &s)
	if !q.bt.aborted || s.outstanding != 0 || q.bt.armed != fetchCmds-1 || r.pending() != 1 {
		t.Fatalf("abort: aborted %v outstanding %d armed %d SQEs %d", q.bt.aborted, s.outstanding, q.bt.armed, r.pending())
	}
	if !s.ended(s.lastRequest) {
		t.Fatal("aborted with nothing in flight: the loop does not end")
	}
}
