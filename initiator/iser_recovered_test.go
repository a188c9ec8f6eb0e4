package initiator_test

import (
	"bytes"
	"crypto/rand"
	"syscall"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
)

// TestISERRecoveredErrorRead: over iSER the target places read data by
// RDMA, so the initiator cannot count what arrived. A read answered CHECK
// CONDITION / RECOVERED ERROR, with no data placed and no residual, must
// not pass as success with whatever the bounce slot held before (here the
// previous read's data): the LUN retries it and returns the GOOD retry's
// data; when every attempt ends that way the read fails with EIO. A write
// answered RECOVERED ERROR still succeeds. Before the fix the first read
// returned the previous read's bytes as success.
func TestISERRecoveredErrorRead(t *testing.T) {
	s, _, fc := iserSession(t, 4096)
	disk := fc.Target().Disk()
	rand.Read(disk)
	l, err := initiator.OpenLUN(ctx5(t), s, 1)
	if err != nil {
		t.Fatal(err)
	}
	other := make([]byte, 4096) // fills the bounce slot with other data
	if err := l.ReadAt(ctx5(t), other, 1<<20); err != nil || !bytes.Equal(other, disk[1<<20:1<<20+4096]) {
		t.Fatalf("read: %v", err)
	}
	fc.Target().RecoveredReads(1)
	got := make([]byte, 4096)
	if err := l.ReadAt(ctx5(t), got, 0); err != nil {
		t.Fatalf("read retried after RECOVERED ERROR: %v", err)
	}
	if !bytes.Equal(got, disk[:4096]) {
		t.Fatalf("read answered RECOVERED ERROR returned wrong data (same as the previous read: %v)", bytes.Equal(got, other))
	}

	fc.Target().RecoveredReads(1000)
	if err := l.ReadAt(ctx5(t), got, 0); errnoOf(err) != syscall.EIO {
		t.Errorf("read always answered RECOVERED ERROR: %v (errno %v), want EIO", err, errnoOf(err))
	}
	fc.Target().RecoveredReads(0)

	want := bytes.Repeat([]byte{0x5a}, 4096)
	fc.Target().RecoveredWrites(1)
	if err := l.WriteAt(ctx5(t), want, 8192, false); err != nil {
		t.Errorf("write answered RECOVERED ERROR: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session: %v", err)
	}
	if err := l.ReadAt(ctx5(t), got, 8192); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read back the write: %v, data equal %v", err, bytes.Equal(got, want))
	}
}
