package initiator_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// luNexus runs a Nexus whose every connection is served by lu; dropping
// set makes the next SCSI command close its connection unanswered.
func luNexus(t *testing.T, lu *iscsitest.LU, dropping *atomic.Bool) (*initiator.Nexus, *fakePortals) {
	t.Helper()
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			if req.BHS.Opcode() == pdu.OpSCSICommand && dropping.CompareAndSwap(true, false) {
				return []iscsitest.Reply{{Close: true}}
			}
			return lu.Handle(tg, req)
		}
	}}
	return dialNexus(t, f, nil), f
}

// cacheWatch registers a frontend that answers adopt and reports each
// change it is told about.
func cacheWatch(l *initiator.LUN, frontendWB, adopt bool) <-chan bool {
	ch := make(chan bool, 8)
	l.OnWriteCacheChange(frontendWB, func(wb bool) bool {
		ch <- wb
		if adopt {
			return wb
		}
		return frontendWB
	})
	return ch
}

func waitChange(t *testing.T, ch <-chan bool, want bool) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("frontend told write-back=%v, want %v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("frontend was not told of the write cache change (want write-back=%v)", want)
	}
}

// TestLUNReprobesWriteCacheOnReinstatement: the target turned its write
// cache on while the session was down; after the Nexus reinstates the
// session the LUN reads the caching page again and tells the frontend.
func TestLUNReprobesWriteCacheOnReinstatement(t *testing.T) {
	lu := iscsitest.NewLU(2048, false, true)
	var dropping atomic.Bool
	nx, f := luNexus(t, lu, &dropping)
	l, err := initiator.OpenLUN(ctx5(t), nx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if l.Info().WriteCache {
		t.Fatal("probe: write cache on, the LU says off")
	}
	changes := cacheWatch(l, false, true)
	lu.SetWriteCache(true, false) // reconfigured without a unit attention
	dropping.Store(true)
	if err := l.ReadAt(ctx5(t), make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	if n := len(f.conns()); n != 2 {
		t.Fatalf("%d connections, want 2 (the session reinstated once)", n)
	}
	waitChange(t, changes, true)
	if !l.Info().WriteCache || !l.WriteCache() {
		t.Fatal("Info().WriteCache still off after the re-probe")
	}
}

// TestLUNReprobesWriteCacheOnModeParametersChanged: UNIT ATTENTION 2A/01
// makes the LUN read the caching page again; the command that met it is
// retried and succeeds.
func TestLUNReprobesWriteCacheOnModeParametersChanged(t *testing.T) {
	lu := iscsitest.NewLU(2048, true, true)
	var dropping atomic.Bool
	nx, _ := luNexus(t, lu, &dropping)
	l, err := initiator.OpenLUN(ctx5(t), nx, 1)
	if err != nil {
		t.Fatal(err)
	}
	changes := cacheWatch(l, true, true)
	probes := lu.ModeSenses()
	lu.SetWriteCache(false, true)
	if err := l.ReadAt(ctx5(t), make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, false)
	if l.Info().WriteCache {
		t.Fatal("Info().WriteCache still on after the re-probe")
	}
	if lu.ModeSenses() <= probes {
		t.Fatal("no MODE SENSE after the unit attention")
	}
}

// TestLUNWritesDurableWhileFrontendWriteThrough: the cache went from
// write-through to write-back but the frontend cannot tell the kernel
// (it keeps sending no flushes): the LUN flushes what was written before at
// once, and makes every later write durable itself, with FUA when the LUN
// takes it and with SYNCHRONIZE CACHE otherwise.
func TestLUNWritesDurableWhileFrontendWriteThrough(t *testing.T) {
	for _, dpofua := range []bool{false, true} {
		lu := iscsitest.NewLU(2048, false, dpofua)
		var dropping atomic.Bool
		nx, _ := luNexus(t, lu, &dropping)
		l, err := initiator.OpenLUN(ctx5(t), nx, 1)
		if err != nil {
			t.Fatal(err)
		}
		changes := cacheWatch(l, false, false)
		ctx := ctx5(t)
		if err := l.WriteAt(ctx, make([]byte, 512), 0, false); err != nil {
			t.Fatal(err)
		}
		before := len(lu.Ops())
		lu.SetWriteCache(true, true)
		if err := l.WriteAt(ctx, make([]byte, 512), 512, false); err != nil {
			t.Fatal(err)
		}
		waitChange(t, changes, true)
		deadline := time.Now().Add(5 * time.Second)
		for !bytes.Contains(lu.Ops()[before:], []byte{0x35}) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !bytes.Contains(lu.Ops()[before:], []byte{0x35}) {
			t.Fatalf("DPOFUA %v: no SYNCHRONIZE CACHE on noticing the write-back cache: %x", dpofua, lu.Ops()[before:])
		}
		mark := len(lu.Ops())
		if err := l.WriteAt(ctx, make([]byte, 512), 1024, false); err != nil {
			t.Fatal(err)
		}
		want := []byte{0x2a, 0x35}
		if dpofua {
			want = []byte{iscsitest.OpFUAWrite}
		}
		if got := lu.Ops()[mark:]; !bytes.Equal(got, want) {
			t.Fatalf("DPOFUA %v: a write while the kernel thinks write-through reached the LU as %x, want %x", dpofua, got, want)
		}
	}
}

// TestLUNReadsUnlistedBlockLimits: a target whose VPD page 0x00 lists
// no page (LIO for a LU without a unit serial) still answers page 0xB0;
// the LUN takes its UNMAP limits, so a discard is split to them instead
// of being refused (LIO fileio: 8192 blocks, one descriptor).
func TestLUNReadsUnlistedBlockLimits(t *testing.T) {
	lu := iscsitest.NewLU(2048, false, true)
	lu.SetBlockLimits(scsi.BlockLimits{MaxTransferLength: 1024, MaxUnmapLBACount: 8192, MaxUnmapDescriptorCount: 1})
	var dropping atomic.Bool
	nx, _ := luNexus(t, lu, &dropping)
	l, err := initiator.OpenLUN(ctx5(t), nx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Info().Limits; got.MaxUnmapLBACount != 8192 || got.MaxUnmapDescriptorCount != 1 {
		t.Fatalf("block limits %+v; want the unlisted page's 8192 blocks in 1 descriptor", got)
	}
}
