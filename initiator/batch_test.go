package initiator_test

import (
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/initiator"
)

// countDone counts CommandDone calls.
type countDone chan error

func (c countDone) CommandDone(_ initiator.Tag, _ *initiator.Result, err error) { c <- err }

// Commands started inside a batch reach the device with one post when the
// batch ends, not one each, and not before.
func TestSessionBatchPostsOnce(t *testing.T) {
	const n = 8
	s, _, fc := iserSessionDepth(t, 4096, 16)
	bufs := make([][]byte, n)
	done := make(countDone, n)
	before := fc.Posts()
	sent0, _ := fc.Sends()
	b := s.BeginBatch()
	for i := range n {
		bufs[i] = make([]byte, 4096)
		cmd := initiator.Command{CDB: rw16(0x88, uint64(i*8), 8), Read: bufs[i]}
		if err := s.Submit(&cmd, done, initiator.Tag(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if p, sent := fc.Posts(), 0; p != before {
		sent, _ = fc.Sends()
		t.Fatalf("%d posts (%d SENDs) inside the batch", p-before, sent-sent0)
	}
	s.EndBatch(b)
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
	if p := fc.Posts() - before; p != 1 {
		t.Errorf("%d posts for a batch of %d commands, want 1", p, n)
	}
	s.EndBatch(blockdev.Batch{}) // a zero batch ends nothing
}

// Two frontend loops' batches overlap on one session: the end of one
// posts its commands without waiting for the other to end.
func TestSessionBatchDoesNotWaitForAnotherBatch(t *testing.T) {
	s, _, _ := iserSessionDepth(t, 4096, 16)
	done := make(countDone, 1)
	other := s.BeginBatch() // loop B's pass, still open
	b := s.BeginBatch()     // loop A's
	cmd := initiator.Command{CDB: rw16(0x88, 0, 8), Read: make([]byte, 4096)}
	if err := s.Submit(&cmd, done, 0); err != nil {
		t.Fatal(err)
	}
	s.EndBatch(b)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		s.EndBatch(other)
		t.Fatal("a read was held back until another loop's batch ended")
	}
	s.EndBatch(other)
}
