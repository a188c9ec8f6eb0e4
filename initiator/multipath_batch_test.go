package initiator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
)

// iserMultipath is a Multipath of n paths, each an iSER session on its
// own fake connection.
func iserMultipath(t *testing.T, n int) (*initiator.Multipath, []*isertest.Conn) {
	t.Helper()
	cfg := initiator.MultipathConfig{NoPathTimeout: time.Second}
	conns := make([]*isertest.Conn, n)
	for i := range n {
		fc := isertest.NewConn(4096)
		conns[i] = fc
		nc := initiator.NexusConfig{Portals: []string{fmt.Sprint("fake", i)},
			Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
				InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:fake"}, NOPInterval: -1, QueueDepth: 16}}
		initiator.SetNexusConnect(&nc, func(ctx context.Context, _ initiator.DialConfig, sc initiator.SessionConfig) (*initiator.Session, error) {
			dm, err := initiator.NewISERDatamover(fc, 16)
			if err != nil {
				return nil, err
			}
			return initiator.NewSession(ctx, dm, sc)
		})
		cfg.Paths = append(cfg.Paths, nc)
	}
	m, err := initiator.DialMultipath(ctx5(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		for i, fc := range conns {
			for _, v := range fc.Violations() {
				t.Errorf("path %d: peer would refuse: %s", i, v)
			}
		}
	})
	return m, conns
}

// A frontend pass over a Multipath holds back the SENDs on every path
// and posts them with one doorbell per path when it ends, as on one
// session; it costs no allocation.
func TestMultipathBatchPostsOncePerPath(t *testing.T) {
	const n = 8
	m, conns := iserMultipath(t, 2)
	done := make(countDone, n)
	before := make([]int, len(conns))
	for i, fc := range conns {
		before[i] = fc.Posts()
	}
	b := m.BeginBatch()
	for i := range n {
		cmd := initiator.Command{CDB: rw16(0x88, uint64(i*8), 8), Read: make([]byte, 4096)}
		if err := m.Submit(&cmd, done, initiator.Tag(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for i, fc := range conns {
		if p := fc.Posts() - before[i]; p != 0 {
			t.Fatalf("path %d: %d posts inside the batch", i, p)
		}
	}
	m.EndBatch(b)
	for range n {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("commands of the batch did not end")
		}
	}
	for i, fc := range conns {
		if p := fc.Posts() - before[i]; p != 1 {
			t.Errorf("path %d: %d posts for its half of a batch of %d, want 1", i, p, n)
		}
	}
	m.EndBatch(blockdev.Batch{}) // a zero batch ends nothing
	if a := testing.AllocsPerRun(100, func() { m.EndBatch(m.BeginBatch()) }); a != 0 {
		t.Errorf("BeginBatch and EndBatch: %v allocations, want 0", a)
	}
	l, err := initiator.OpenLUN(ctx5(t), m, 0)
	if err != nil {
		t.Fatal(err)
	}
	lb := l.BeginBatch()
	if lb.Held == nil {
		t.Error("a LUN on a Multipath does not batch")
	}
	l.EndBatch(lb)
}
