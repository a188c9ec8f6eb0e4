package ublk

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// A queue over a blockdev.Async backend starts reads and writes itself
// and gets their ends through IODone: the byte count, or the errno, comes
// to the loop's completion list with the tag, and is counted once; FLUSH
// still goes through the blocking call.
func TestQueueStartsAsyncRequests(t *testing.T) {
	zero, err := os.Open("/dev/zero") // stands in for /dev/ublkcN's descriptor mapping
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	m := newMemBackend(1<<20, 512)
	a := newAsyncMem(m)
	defer a.close()
	bufs, err := newIOBuffers(a, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	q, err := newQueue(0, 4, int(zero.Fd()), os.Getpagesize(), a, bufs)
	if err != nil {
		t.Fatal(err)
	}
	defer q.release()
	q.ctx, q.st = context.Background(), &stats{}
	if q.async == nil {
		t.Fatal("queue did not take the backend's blockdev.Async")
	}
	copy(bufs.bufs[0], bytes.Repeat([]byte{0x5a}, 8192))
	m.setFail(512<<10, 513<<10)
	reqs := []struct {
		tag int
		d   ioDesc
		res int32
	}{
		{0, desc(ioOpWrite, ioFlagFUA, 16, 16), 8192},
		{1, desc(ioOpRead, 0, 16, 16), 8192},
		{2, desc(ioOpRead, 0, 1024, 8), -int32(syscall.EIO)}, // the failing range
		{3, desc(ioOpRead, 0, 0, 256), -int32(syscall.EIO)},  // more than the 64 KiB buffer: EINVAL, reported as EIO
		{2, desc(ioOpFlush, 0, 0, 0), 0},
	}
	for _, r := range reqs {
		q.workers.Add(1)
		q.start(r.tag, r.d)
		got := waitCompletion(t, q)
		if got.tag != r.tag || got.res != r.res {
			t.Errorf("%+v: completion %+v, want res %d", r.d, got, r.res)
		}
	}
	if !bytes.Equal(bufs.bufs[1][:8192], bytes.Repeat([]byte{0x5a}, 8192)) {
		t.Error("the read did not return what the write wrote")
	}
	if _, fua, _, _ := m.counts(); fua != 1 {
		t.Errorf("%d FUA writes reached the backend, want 1", fua)
	}
	st := q.st.snapshot()
	if st.Reads != 1 || st.Writes != 1 || st.BytesRead != 8192 || st.Errors != 2 || st.Flushes != 1 {
		t.Errorf("stats %+v", st)
	}
}

// waitCompletion takes the next completion off the queue's list, as the
// loop does when the eventfd fires.
func waitCompletion(t *testing.T, q *queue) completion {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		q.mu.Lock()
		if len(q.done) > 0 {
			c := q.done[0]
			q.done = q.done[1:]
			q.mu.Unlock()
			return c
		}
		q.mu.Unlock()
	}
	t.Fatal("no completion")
	return completion{}
}

// A read-only queue ends writes (FUA ones included), discards and
// write-zeroes with EROFS before the backend sees them, and counts each
// as an error; reads and FLUSH are served.
func TestQueueReadOnlyRefusesWrites(t *testing.T) {
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	m := newMemBackend(1<<20, 512)
	copy(m.data[8192:], bytes.Repeat([]byte{0xa5}, 8192))
	a := newAsyncMem(m)
	defer a.close()
	bufs, err := newIOBuffers(a, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	q, err := newQueue(0, 4, int(zero.Fd()), os.Getpagesize(), a, bufs)
	if err != nil {
		t.Fatal(err)
	}
	defer q.release()
	q.ctx, q.st, q.readOnly = context.Background(), &stats{}, true
	copy(bufs.bufs[0], bytes.Repeat([]byte{0x5a}, 8192))
	erofs := -int32(syscall.EROFS)
	for _, r := range []struct {
		tag int
		d   ioDesc
		res int32
	}{
		{0, desc(ioOpWrite, 0, 16, 16), erofs},
		{0, desc(ioOpWrite, ioFlagFUA, 16, 16), erofs},
		{1, desc(ioOpDiscard, 0, 16, 16), erofs},
		{2, desc(ioOpWriteZeroes, 0, 16, 16), erofs},
		{3, desc(ioOpWriteSame, 0, 16, 16), erofs},
		{1, desc(ioOpRead, 0, 16, 16), 8192},
		{2, desc(ioOpFlush, 0, 0, 0), 0},
	} {
		q.workers.Add(1)
		q.start(r.tag, r.d)
		if got := waitCompletion(t, q); got.tag != r.tag || got.res != r.res {
			t.Errorf("%+v: completion %+v, want res %d", r.d, got, r.res)
		}
	}
	if !bytes.Equal(bufs.bufs[1][:8192], bytes.Repeat([]byte{0xa5}, 8192)) {
		t.Error("the read does not show the data as it was: a write reached the backend")
	}
	if _, fua, trims, zeroes := m.counts(); fua != 0 || trims != 0 || zeroes != 0 {
		t.Errorf("the backend saw %d FUA writes, %d trims, %d write-zeroes", fua, trims, zeroes)
	}
	if st := q.st.snapshot(); st.Errors != 5 || st.Writes != 0 || st.Reads != 1 || st.Flushes != 1 {
		t.Errorf("stats %+v", st)
	}
}
