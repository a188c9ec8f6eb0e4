package initiator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// TestFullWindowDoesNotPreemptTheAbort: the target's window is one command.
// X is swallowed (window now closed), Y waits for the window. X times out
// and ABORT TASK completes 100 ms later, reopening the window. Y's window
// timer started just after X was sent, so it fires ~together with X's
// command timeout and drops the session before the ABORT TASK answer:
// the escalation never gets a chance whenever the window is full.
func TestFullWindowDoesNotPreemptTheAbort(t *testing.T) {
	const tmo = 300 * time.Millisecond
	s, _, err := loginTo(t, swallowFirstCommand(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		switch req.BHS.Opcode() {
		case pdu.OpLoginReq:
			tg.Window = 1
			return tg.Login(req, iscsitest.LoginOptions{})
		case pdu.OpTaskMgmtReq:
			r := tg.Good(req)
			r[0].Delay = 100 * time.Millisecond
			return r
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.CommandTimeout = tmo; c.NOPInterval = -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errX := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx5(t), write10(make([]byte, 512)))
		errX <- err
	}()
	time.Sleep(20 * time.Millisecond) // X is out; the window is closed
	_, errY := s.Do(ctx5(t), write10(make([]byte, 512)))
	if err := <-errX; !errors.Is(err, initiator.ErrTaskAborted) {
		t.Errorf("X: %v; want ErrTaskAborted", err)
	}
	if errY != nil {
		t.Errorf("Y: %v; want success once the abort reopened the window", errY)
	}
	if err := s.Err(); err != nil {
		t.Errorf("session dropped: %v", err)
	}
}
