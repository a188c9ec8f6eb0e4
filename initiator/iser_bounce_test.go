package initiator_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// rwRoundTrip writes buf at lba and reads it back into back, concurrently
// from many goroutines: each i gets bufs[i] and backs[i].
func rwRoundTrip(t *testing.T, s *initiator.Session, bufs, backs [][]byte) {
	t.Helper()
	ctx := ctx5(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(bufs))
	for i := range bufs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, back := bufs[i], backs[i]
			rand.Read(buf)
			want := append([]byte(nil), buf...)
			nb := uint32(len(buf) / 512)
			lba := uint64(i) * uint64(nb)
			if r, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x8a, lba, nb), Write: buf}); err != nil || r.Status != 0 {
				errs <- fmt.Errorf("write %d: %v %+v", i, err, r)
				return
			}
			if r, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, lba, nb), Read: back}); err != nil || r.Status != 0 {
				errs <- fmt.Errorf("read %d: %v %+v", i, err, r)
				return
			}
			if !bytes.Equal(back, want) {
				errs <- fmt.Errorf("goroutine %d: data differs", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestISERRegisteredBuffersPinOneSet: with the frontend's I/O buffers
// registered (as ublk's through a Nexus), the datamover must not pin a
// bounce region of its own as large again: a full queue of I/O through the
// registered buffers, plus a small command in plain memory, leaves the
// memory pinned besides the I/O buffers a small fraction of them. I/O
// through plain memory still works, bounced.
func TestISERRegisteredBuffersPinOneSet(t *testing.T) {
	const depth = 64
	s, dm, fc := iserSessionDepth(t, depth*initiator.MaxTransfer/512, depth)
	var pinner initiator.MemoryPinner = dm
	io := make([]byte, depth*initiator.MaxTransfer)
	if err := dm.RegisterIOBuffers(io); err != nil {
		t.Fatal(err)
	}
	bufs, backs := make([][]byte, depth/2), make([][]byte, depth/2)
	for i := range bufs {
		bufs[i] = io[2*i*initiator.MaxTransfer : (2*i+1)*initiator.MaxTransfer]
		backs[i] = io[(2*i+1)*initiator.MaxTransfer : (2*i+2)*initiator.MaxTransfer]
	}
	rwRoundTrip(t, s, bufs, backs)
	// A control command in plain memory (as INQUIRY or MODE SENSE).
	small := make([]byte, 4096)
	if r, err := s.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, 8), Read: small}); err != nil || r.Status != 0 {
		t.Fatalf("small read: %v %+v", err, r)
	}
	if !bytes.Equal(small, fc.Target().Disk()[:4096]) {
		t.Fatal("small read: data differs")
	}
	pinned := pinner.PinnedBytes()
	if got := fc.RegisteredBytes(); got != pinned {
		t.Fatalf("PinnedBytes %d, but %d bytes are registered with the device", pinned, got)
	}
	if other := pinned - int64(len(io)); other > int64(len(io))/4 {
		t.Fatalf("%d MiB pinned besides %d MiB of registered I/O buffers: a second set of data buffers",
			other>>20, len(io)>>20)
	}
	if uses := fc.RKeyUses(); uses[0x9003] < 2*len(bufs) {
		t.Fatalf("RDMA accesses per rkey %v: the registered I/O buffers (0x9003, after the control region and the first bounce chunk) were not used zero-copy", uses)
	}

	// Plain memory: bounced through slots the pool registers on demand.
	for i := range bufs {
		bufs[i], backs[i] = make([]byte, initiator.MaxTransfer), make([]byte, initiator.MaxTransfer)
	}
	rwRoundTrip(t, s, bufs, backs)
	if got, most := pinner.PinnedBytes()-pinned, int64(depth+8)*initiator.MaxTransfer; got <= 0 || got > most {
		t.Fatalf("bounced I/O pinned %d more bytes, want more than 0 and at most %d", got, most)
	}
}

// TestISERRejectedCommandsReturnSlots: a SCSI Command the target Rejects
// never started, so its bounce slot goes back to the pool. More rejects
// than the pool has slots, then a full queue of bounced I/O, must work.
func TestISERRejectedCommandsReturnSlots(t *testing.T) {
	const depth = 16
	s, _, fc := iserSessionDepth(t, 4096, depth)
	ctx := ctx5(t)
	// A bounced write leaves its data in the slot the rejected reads reuse.
	data := make([]byte, 4096)
	rand.Read(data)
	if r, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x8a, 0, 8), Write: data}); err != nil || r.Status != 0 {
		t.Fatalf("write: %v %+v", err, r)
	}
	const n = 3 * (depth + 8)
	fc.Target().RejectCommands(n, 0x05)
	for i := range n {
		buf := bytes.Repeat([]byte{0xa5}, 4096)
		_, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, uint64(i), 8), Read: buf})
		var re *initiator.RejectError
		if !errors.As(err, &re) || re.Op != pdu.OpSCSICommand {
			t.Fatalf("command %d: %v, want a Reject of the SCSI Command", i, err)
		}
		if !bytes.Equal(buf, bytes.Repeat([]byte{0xa5}, 4096)) {
			t.Fatalf("command %d: a rejected read changed its buffer (a bounce slot's stale data copied in)", i)
		}
	}
	if s.Err() != nil {
		t.Fatalf("session failed: %v", s.Err())
	}
	bufs, backs := make([][]byte, depth), make([][]byte, depth)
	for i := range bufs {
		bufs[i], backs[i] = make([]byte, 64<<10), make([]byte, 64<<10)
	}
	rwRoundTrip(t, s, bufs, backs)
}
