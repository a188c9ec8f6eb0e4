package initiator_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
)

// slowTeardown is an iSER datamover whose Close takes a while before the
// queue pair goes to the error state, as a real teardown can; it records
// when Close has completed.
type slowTeardown struct {
	*initiator.ISERDatamover
	delay  time.Duration
	once   sync.Once
	closed chan struct{}
}

func (d *slowTeardown) Close() error {
	d.once.Do(func() {
		time.Sleep(d.delay)
		d.ISERDatamover.Close()
		close(d.closed)
	})
	return nil
}

// TestFailedSessionReleasesWaitersOnlyAfterTeardown: a target still
// RDMA-writing a zero-copy read when the keepalive fails the session must
// not write into the caller's buffer after Do has returned; Do returns only
// once the datamover's Close has completed.
func TestFailedSessionReleasesWaitersOnlyAfterTeardown(t *testing.T) {
	fc := isertest.NewConn(1024)
	for i := range fc.Target().Disk() {
		fc.Target().Disk()[i] = byte(i%251 + 1)
	}
	fc.Target().SetTrickle(4 * time.Millisecond) // 512 KiB take 512 ms
	inner, err := initiator.NewISERDatamover(fc, 16)
	if err != nil {
		t.Fatal(err)
	}
	dm := &slowTeardown{ISERDatamover: inner, delay: 100 * time.Millisecond, closed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.NewSession(ctx, dm, initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:fake", ISID: initiator.NewISID()},
		NOPInterval: 20 * time.Millisecond, NOPTimeout: 40 * time.Millisecond, QueueDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, initiator.MaxTransfer)
	if err := inner.RegisterIOBuffers(buf); err != nil { // zero copy: the target writes into buf
		t.Fatal(err)
	}
	_, err = s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, initiator.MaxTransfer/512), Read: buf})
	if err == nil {
		t.Fatal("read succeeded; want the keepalive to end the session first")
	}
	select {
	case <-dm.closed:
	default:
		t.Fatalf("Do returned (%v) before the datamover's Close completed", err)
	}
	snap := bytes.Clone(buf)
	time.Sleep(300 * time.Millisecond) // longer than the rest of the trickle
	if !bytes.Equal(snap, buf) {
		t.Fatal("the target wrote into the read buffer after Do returned")
	}
	if v := fc.Violations(); len(v) > 0 {
		t.Fatalf("peer would refuse: %v", v)
	}
}
