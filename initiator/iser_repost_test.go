package initiator_test

import (
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
)

// TestISERRepostsInBatches: the receives a batch of completions consumed
// are posted again a few at a time (iserRepostBatch, 8), not one call
// each, and none is left out when the batch ends: with 20 responses
// waiting in the CQ, one Reap posts them back in three calls (8, 8 and
// the 4 left at the end) and the ring is whole again, and the target
// never found a receive missing (RNR).
func TestISERRepostsInBatches(t *testing.T) {
	const depth, n = 32, 20
	l, rp, fake := reapingLUN(t, "repost", depth)
	fc := fake.conn(-1)
	// Whatever the LUN's probe left in the CQ first.
	d := &reapDone{errs: make(chan error, n)}
	d.inReap.Store(true)
	rp.Reap()
	calls0, ring := fc.RecvPosts()
	// The queue depth, the 16 control slots and the 8 a batch may hold back.
	if ring != depth+16+8 {
		t.Fatalf("%d receives posted after the first reap, want the whole ring's %d", ring, depth+16+8)
	}

	var b blockdev.Batch = l.BeginBatch()
	for i := range n {
		l.StartRead(make([]byte, 4096), int64(i)*4096, d, uint32(i))
	}
	l.EndBatch(b)
	// The target answers all n; their receives wait in the CQ.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, posted := fc.RecvPosts(); posted == ring-n {
			break
		}
		if time.Now().After(end) {
			_, posted := fc.RecvPosts()
			t.Fatalf("%d receives posted, want %d once the target answered all %d reads", posted, ring-n, n)
		}
	}
	if !rp.Reap() {
		t.Fatal("Reap reported the end of a live connection")
	}
	for range n {
		d.wait(t)
	}
	calls, posted := fc.RecvPosts()
	if posted != ring {
		t.Errorf("%d receives posted after the reap, want the whole ring's %d", posted, ring)
	}
	if got, want := calls-calls0, (n+7)/8; got != want {
		t.Errorf("%d receives reposted in %d calls, want %d", n, got, want)
	}
	for _, v := range fc.Violations() {
		t.Errorf("peer would refuse: %s", v)
	}
}
