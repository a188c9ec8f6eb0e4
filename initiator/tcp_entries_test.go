package initiator

import (
	"io"
	"testing"

	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// The TCP datamover keeps a command's data state in its own per-index
// entries, made once and reused (the Task carries none of it), and a late
// ITT of an earlier generation of the index finds nothing.
func TestTCPCommandStateReused(t *testing.T) {
	d, peer := tcpPair(t)
	go io.Copy(io.Discard, peer)
	buf := make([]byte, 4096)
	task := &Task{Read: buf}
	gen := uint16(1)
	var first *tcpTaskState
	run := func() {
		task.ITT = makeITT(gen, 3)
		task.done = false
		gen++
		cmd := pdu.SCSICommand{Read: true, ITT: task.ITT, ExpectedDataTransferLength: 4096}
		if err := d.SendCommand(&cmd, task); err != nil {
			t.Fatal(err)
		}
		got, st := d.lookup(task.ITT)
		if got != task || st == nil || st.cmd.ITT != task.ITT {
			t.Fatalf("lookup(%#x) = %p, %v; want the task and its state", task.ITT, got, st)
		}
		if first == nil {
			first = st
		} else if st != first {
			t.Fatalf("ITT %#x: a new state for index 3, want the entry's", task.ITT)
		}
		d.TaskDone(task)
	}
	for i := 0; i < 3; i++ {
		run()
	}
	old := task.ITT
	run()
	if got, st := d.lookup(old); got != nil || st != nil {
		t.Errorf("an earlier generation's ITT %#x still finds a task", old)
	}
	if got, _ := d.lookup(makeITT(1, 70)); got != nil {
		t.Error("an index never used finds a task")
	}
}
