package initiator_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// TestLUResetDoesNotEndCommandsSentAfterIt: command A is swallowed, ABORT
// TASK is refused, LOGICAL UNIT RESET is sent. While the reset is pending
// the caller issues command B (CmdSN >= the reset's CmdSN): the reset does
// not cover it, and the target executes it and answers GOOD after the TMF
// response. B must succeed; with the bug endLUNTasks ends it with
// ErrTaskAborted (and a Nexus reissues it: the write runs twice; over iSER
// its bounce slot / zero-copy buffer is reused while the target still
// RDMA-accesses it).
func TestLUResetDoesNotEndCommandsSentAfterIt(t *testing.T) {
	var mu sync.Mutex
	var resetITT uint32
	resetSeen := make(chan struct{})
	cmds := 0
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		switch req.BHS.Opcode() {
		case pdu.OpSCSICommand:
			mu.Lock()
			cmds++
			n := cmds
			mu.Unlock()
			if n == 1 {
				tg.Ack(req) // A: swallowed
				return nil
			}
			if n == 2 {
				// B arrived after the reset: the reset completes, then B runs.
				out := []iscsitest.Reply{tmfReply(tg, resetITT, 0)}
				good := tg.Good(req)
				good[0].Delay = 100 * time.Millisecond // B takes a moment to execute
				return append(out, good...)
			}
		case pdu.OpTaskMgmtReq:
			r := tmfRequest(req)
			if r.Function == pdu.TMFAbortTask {
				return []iscsitest.Reply{tmfReply(tg, r.ITT, 5)}
			}
			if r.Function == pdu.TMFLogicalUnitReset {
				resetITT = r.ITT
				close(resetSeen)
				return nil // answered with B
			}
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.CommandTimeout = 300 * time.Millisecond; c.NOPInterval = -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errA := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx5(t), write10(make([]byte, 512)))
		errA <- err
	}()
	select {
	case <-resetSeen:
	case <-time.After(3 * time.Second):
		t.Fatal("no LU reset")
	}
	r, err := s.Do(ctx5(t), write10(make([]byte, 512)))
	if err != nil || r.Status != 0 {
		t.Errorf("command B, issued after the LU RESET and completed GOOD by the target: %v (aborted: %v)",
			err, errors.Is(err, initiator.ErrTaskAborted))
	}
	if err := <-errA; !errors.Is(err, initiator.ErrTaskAborted) {
		t.Errorf("command A: %v; want ErrTaskAborted", err)
	}
}
