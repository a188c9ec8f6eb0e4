package initiator_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
)

func iserSession(t *testing.T, blocks int) (*initiator.Session, *initiator.ISERDatamover, *isertest.Conn) {
	t.Helper()
	return iserSessionDepth(t, blocks, 16)
}

func iserSessionDepth(t *testing.T, blocks, depth int) (*initiator.Session, *initiator.ISERDatamover, *isertest.Conn) {
	t.Helper()
	fc := isertest.NewConn(blocks)
	dm, err := initiator.NewISERDatamover(fc, depth)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.NewSession(ctx, dm, initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:fake", ISID: initiator.NewISID()},
		NOPInterval: -1, QueueDepth: depth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		for _, v := range fc.Violations() {
			t.Errorf("peer would refuse: %s", v)
		}
	})
	return s, dm, fc
}

func rw16(op byte, lba uint64, blocks uint32) []byte {
	cdb := make([]byte, 16)
	cdb[0] = op
	binary.BigEndian.PutUint64(cdb[2:], lba)
	binary.BigEndian.PutUint32(cdb[10:], blocks)
	return cdb
}

func TestISERNegotiatesRDMAExtensions(t *testing.T) {
	s, _, _ := iserSession(t, 64)
	p := s.Params()
	if !p.RDMAExtensions || p.HeaderDigest || p.DataDigest {
		t.Fatalf("params %+v", p)
	}
	if s.Transport() != "iser" {
		t.Fatalf("transport %q", s.Transport())
	}
}

// TestISERReadWriteSizes writes and reads random data from one block to
// 512 KiB at many offsets, through bounce buffers and through buffers
// carved from the registered region, and checks the target's disk.
func TestISERReadWriteSizes(t *testing.T) {
	const blocks = 8192 // 4 MiB
	s, dm, fc := iserSession(t, blocks)
	ctx := ctx5(t)
	mem := make([]byte, 2*initiator.MaxTransfer)
	if err := dm.RegisterIOBuffers(mem); err != nil {
		t.Fatal(err)
	}
	bufs := [][]byte{mem[:initiator.MaxTransfer], mem[initiator.MaxTransfer:]}
	sizes := []int{1, 2, 7, 8, 16, 17, 64, 255, 256, 1024} // blocks
	for i, nb := range sizes {
		for _, zeroCopy := range []bool{false, true} {
			n := nb * 512
			lba := uint64((i*997 + nb*13) % (blocks - nb))
			var data, back []byte
			if zeroCopy {
				data, back = bufs[0][:n], bufs[1][:n]
			} else {
				data, back = make([]byte, n), make([]byte, n)
			}
			rand.Read(data)
			want := append([]byte(nil), data...)
			r, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x8a, lba, uint32(nb)), Write: data})
			if err != nil || r.Status != 0 {
				t.Fatalf("write %d blocks at %d: %v %+v", nb, lba, err, r)
			}
			if !bytes.Equal(fc.Target().Disk()[lba*512:lba*512+uint64(n)], want) {
				t.Fatalf("write %d blocks at %d (zero copy %v): target disk differs", nb, lba, zeroCopy)
			}
			r, err = s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, lba, uint32(nb)), Read: back})
			if err != nil || r.Status != 0 {
				t.Fatalf("read: %v %+v", err, r)
			}
			if !bytes.Equal(back, want) {
				t.Fatalf("read %d blocks at %d (zero copy %v): data differs", nb, lba, zeroCopy)
			}
		}
	}
	if fc.Target().Immediate == 0 {
		t.Fatal("no immediate data was sent")
	}
	// Regions: control 0x9001, RegisterIOBuffers 0x9002, the first bounce chunk 0x9003.
	uses := fc.RKeyUses()
	if uses[0x9003] == 0 || uses[0x9002] == 0 || uses[0x9001] != 0 {
		t.Fatalf("RDMA accesses per rkey %v: want both bounce and zero-copy, never the control region", uses)
	}
}

func TestISERConcurrentCommands(t *testing.T) {
	s, _, fc := iserSession(t, 4096)
	ctx := ctx5(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			rand.Read(buf)
			lba := uint64(g * 128)
			if _, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x8a, lba, 128), Write: buf}); err != nil {
				errs <- err
				return
			}
			back := make([]byte, len(buf))
			if _, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, lba, 128), Read: back}); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(back, buf) {
				errs <- fmt.Errorf("goroutine %d: data differs", g)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if fc.Target().Commands != 64 {
		t.Fatalf("target served %d commands", fc.Target().Commands)
	}
}

func TestISERCheckCondition(t *testing.T) {
	s, _, _ := iserSession(t, 16)
	r, err := s.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 100, 1), Read: make([]byte, 512)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 2 || len(r.Sense) < 14 || r.Sense[12] != 0x21 {
		t.Fatalf("result %+v", r)
	}
}

func TestISERCloseUnblocks(t *testing.T) {
	s, _, _ := iserSession(t, 16)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
	if _, err := s.Do(context.Background(), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, 1), Read: make([]byte, 512)}); err == nil {
		t.Fatal("command after Close succeeded")
	}
}
