package nbd

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/internal/rawwait"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// refusing hands its completion source over until refuse is set (a
// session that is down: Nexus.Reaper reports false).
type refusing struct {
	*nbdtest.ReapingMemory
	refuse atomic.Bool
}

func (r *refusing) Reaper(f func()) (blockdev.Reaper, bool) {
	if r.refuse.Load() {
		return nil, false
	}
	return r.ReapingMemory.Reaper(f)
}

// freeSlots counts the raw-wait slots free in the process.
func freeSlots() int {
	var hs []rawwait.Slot
	n := 0
	for {
		hs = append(hs, rawwait.Slot{})
		h := &hs[len(hs)-1]
		rawwait.Process.Take(h)
		if !h.Held() {
			break
		}
		n++
	}
	for i := range hs {
		rawwait.Process.Give(&hs[i])
	}
	return n
}

// A writer that lost its completion source and waits on the reply queue
// the usual way must not keep a raw-wait slot.
func TestWriterGivesRawSlotWhenSourceGone(t *testing.T) {
	want := freeSlots()
	if want < 1 {
		t.Skipf("no raw waits at GOMAXPROCS %d (or asyncpreemptoff=1)", runtime.GOMAXPROCS(0))
	}
	m := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20, BlockSize: 512})
	rb := &refusing{ReapingMemory: m.Reaping()}
	ts := startServer(t, []Export{{Name: "r", Backend: rb}}, Options{})
	c := dialRaw(t, ts.sock)
	c.goExport("r")
	eventually(t, "the writer holds the reaper", rb.Held)
	// Busy: the next waits are raw, with a slot.
	for i := 0; i < 4; i++ {
		if errno, _ := c.do(request{Type: cmdRead, Handle: uint64(i), Length: 4096}, nil); errno != 0 {
			t.Fatalf("read: errno %d", errno)
		}
	}
	rb.refuse.Store(true)
	rb.Revoke()
	eventually(t, "released", func() bool { return rb.ReapStats().Releases == 1 })
	// The writer now blocks on the reply channel, the usual way.
	eventually(t, "the writer gives its raw-wait slot back", func() bool { return freeSlots() == want })
}
