package initiator_test

import (
	"errors"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// A reservation that failed (no bounce slot) reserves nothing: a later
// SendCommand for the same Task and ITT prepares its buffer afresh, as it
// does without a reservation, instead of taking the half-made entry (no
// memory) for one.
func TestISERSendAfterFailedReservation(t *testing.T) {
	const depth = 4 // entries 0..19; a session deeper than that uses extra ones
	for _, idx := range []uint32{9, 40} {
		fc := isertest.NewConn(64)
		dm, err := initiator.NewISERDatamover(fc, depth)
		if err != nil {
			t.Fatal(err)
		}
		// The first chunk of bounce slots (8), all reserved.
		held := make([]initiator.Task, 8)
		for i := range held {
			held[i] = initiator.Task{ITT: 1<<16 | uint32(i), Read: make([]byte, 512)}
			if err := dm.PrepareCommand(&held[i]); err != nil {
				t.Fatal(err)
			}
		}
		fc.FailRegistrations(0, 1)
		task := initiator.Task{ITT: 1<<16 | idx, Read: make([]byte, 512)}
		if err := dm.PrepareCommand(&task); !errors.Is(err, initiator.ErrNoBounceSlot) {
			t.Fatalf("index %d: reservation without a slot: %v; want ErrNoBounceSlot", idx, err)
		}
		dm.TaskDone(&held[0]) // a slot comes back
		cmd := pdu.SCSICommand{Read: true, ITT: task.ITT, ExpectedDataTransferLength: 512}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("index %d: SendCommand after a failed reservation panicked: %v", idx, r)
				}
			}()
			if err := dm.SendCommand(&cmd, &task); err != nil {
				t.Errorf("index %d: SendCommand after a failed reservation: %v", idx, err)
			}
		}()
		dm.Close()
	}
}
