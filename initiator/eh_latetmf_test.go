package initiator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// TestLateAbortResponseDoesNotDropTheSession: the target swallows a
// command and answers its ABORT TASK, but only after the TMF timeout; it
// completes the LOGICAL UNIT RESET at once. The escalation should end the
// command with ErrTaskAborted and keep the session. With the bug the late
// Task Management Response hits "response for unknown ITT" (the TMF's
// waiter was unregistered on timeout) and the reader fails the session.
func TestLateAbortResponseDoesNotDropTheSession(t *testing.T) {
	const tmo = 200 * time.Millisecond
	s, _, err := loginTo(t, withLogin(swallowFirstCommand(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpTaskMgmtReq {
			if r := tmfRequest(req); r.Function == pdu.TMFAbortTask {
				// "Task does not exist", a little after the TMF timeout.
				late := tmfReply(tg, r.ITT, 1)
				late.Delay = tmo + 100*time.Millisecond
				return []iscsitest.Reply{late}
			}
		}
		return tg.Good(req)
	})), func(c *initiator.SessionConfig) { c.CommandTimeout = tmo; c.NOPInterval = -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Do(ctx5(t), write10(make([]byte, 512)))
	if !errors.Is(err, initiator.ErrTaskAborted) {
		t.Errorf("command: %v; want ErrTaskAborted from the LU reset", err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := s.Err(); err != nil {
		t.Errorf("session dropped by a late TMF response: %v", err)
	}
}
