package initiator_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
)

// TestLUNRescan: the LU grew without telling; Rescan reads READ CAPACITY
// again, and Size, Info and the I/O range check follow.
func TestLUNRescan(t *testing.T) {
	lu := iscsitest.NewLU(2048, false, false)
	var dropping atomic.Bool
	nx, _ := luNexus(t, lu, &dropping)
	l, err := initiator.OpenLUN(ctx5(t), nx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReadAt(ctx5(t), make([]byte, 512), 2048*512); err == nil {
		t.Fatal("read beyond the end succeeded")
	}
	lu.SetBlocks(4096, false)
	oldSize, newSize, err := l.Rescan(ctx5(t))
	if err != nil || oldSize != 2048*512 || newSize != 4096*512 {
		t.Fatalf("Rescan() = %d, %d, %v", oldSize, newSize, err)
	}
	if l.Size() != 4096*512 || l.Info().Blocks != 4096 || l.Info().Size() != 4096*512 {
		t.Fatalf("Size %d, Info %+v", l.Size(), l.Info())
	}
	if err := l.ReadAt(ctx5(t), make([]byte, 512), 4095*512); err != nil {
		t.Fatalf("read in the grown part: %v", err)
	}
}

// TestLUNRescansOnCapacityChanged: UNIT ATTENTION 2A/09 makes the LUN read
// its capacity again and tell the frontend the old and new sizes; the
// command that met it is retried and succeeds.
func TestLUNRescansOnCapacityChanged(t *testing.T) {
	lu := iscsitest.NewLU(2048, false, false)
	var dropping atomic.Bool
	nx, _ := luNexus(t, lu, &dropping)
	l, err := initiator.OpenLUN(ctx5(t), nx, 1)
	if err != nil {
		t.Fatal(err)
	}
	type change struct{ from, to int64 }
	ch := make(chan change, 4)
	l.OnCapacityChange(func(from, to int64) { ch <- change{from, to} })
	lu.SetBlocks(8192, true)
	if err := l.ReadAt(ctx5(t), make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		if c.from != 2048*512 || c.to != 8192*512 {
			t.Fatalf("told %d -> %d", c.from, c.to)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the frontend was not told of the new capacity")
	}
	if l.Size() != 8192*512 {
		t.Fatalf("Size %d after the unit attention", l.Size())
	}
}
