package initiator_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// TestErrorHandlingPerLUN: command A on LUN 1 is swallowed and the target
// answers none of its task management (ABORT TASK, then LOGICAL UNIT
// RESET, each waited for up to the command timeout). Meanwhile command B
// on LUN 2, also swallowed, is cancelled; its ABORT TASK is answered at
// once. B must return (cancelled) before A's escalation reaches LOGICAL
// UNIT RESET: error handling on one LUN does not wait behind another's.
// Before the fix one session-wide lock made B wait for A's whole
// escalation, up to the session drop.
func TestErrorHandlingPerLUN(t *testing.T) {
	lunA, lunB := [8]byte{0, 1}, [8]byte{0, 2}
	var mu sync.Mutex
	var events []string
	event := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	abortA := make(chan struct{})
	seen := make(chan [8]byte, 2)
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		switch req.BHS.Opcode() {
		case pdu.OpSCSICommand:
			tg.Ack(req) // swallowed
			var c pdu.SCSICommand
			_ = c.Unmarshal(&req.BHS)
			seen <- c.LUN
			return nil
		case pdu.OpTaskMgmtReq:
			var r pdu.TaskMgmtRequest
			_ = r.Unmarshal(&req.BHS)
			switch {
			case r.LUN == lunB && r.Function == pdu.TMFAbortTask:
				event("B abort")
				resp := pdu.TaskMgmtResponse{ITT: r.ITT, TargetSNs: tg.SNs(true)}
				return []iscsitest.Reply{{PDU: pdu.NewPDU(&resp, nil)}}
			case r.LUN == lunA && r.Function == pdu.TMFAbortTask:
				event("A abort")
				close(abortA)
			case r.LUN == lunA && r.Function == pdu.TMFLogicalUnitReset:
				event("A reset")
			default:
				t.Errorf("unexpected task management function %d", r.Function)
			}
			return nil // A's TMFs are never answered
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.CommandTimeout = time.Second; c.NOPInterval = -1 })
	if err != nil {
		t.Fatal(err)
	}
	errA := make(chan error, 1)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	go func() {
		_, err := s.Do(ctxA, &initiator.Command{LUN: lunA, CDB: []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, Read: make([]byte, 512)})
		errA <- err
	}()
	ctxB, cancelB := context.WithCancel(context.Background())
	errB := make(chan error, 1)
	go func() {
		_, err := s.Do(ctxB, &initiator.Command{LUN: lunB, CDB: []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, Read: make([]byte, 512)})
		event("B returned")
		errB <- err
	}()
	for range 2 {
		select {
		case <-seen:
		case <-time.After(3 * time.Second):
			t.Fatal("the commands did not reach the target")
		}
	}
	cancelA() // A's escalation starts
	select {
	case <-abortA:
	case <-time.After(3 * time.Second):
		t.Fatal("no ABORT TASK for A")
	}
	cancelB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Errorf("B: %v; want context.Canceled (aborted at the target)", err)
	}
	<-errA
	mu.Lock()
	defer mu.Unlock()
	b, r := slices.Index(events, "B returned"), slices.Index(events, "A reset")
	if slices.Index(events, "B abort") < 0 || r < 0 || b > r {
		t.Errorf("events %v: B's cancellation must be handled (its ABORT TASK answered) before A's LU RESET", events)
	}
}

// TestErrorHandlingStatusWhileWaiting: commands A and C on the same LUN
// are swallowed and both cancelled; A's escalation runs first and its
// task management is never answered. When A's LOGICAL UNIT RESET reaches
// the target, the target sends C's status (GOOD) instead. C, waiting for
// its turn at error handling, must return that status at once rather than
// after A's escalation dropped the session. Before the fix C waited for
// the session drop.
func TestErrorHandlingStatusWhileWaiting(t *testing.T) {
	lun := [8]byte{0, 1}
	var mu sync.Mutex
	var cmds []*pdu.PDU
	seen := make(chan struct{}, 2)
	abortA := make(chan struct{})
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		switch req.BHS.Opcode() {
		case pdu.OpSCSICommand:
			tg.Ack(req) // swallowed
			mu.Lock()
			cmds = append(cmds, req)
			mu.Unlock()
			seen <- struct{}{}
			return nil
		case pdu.OpTaskMgmtReq:
			var r pdu.TaskMgmtRequest
			_ = r.Unmarshal(&req.BHS)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Function == pdu.TMFAbortTask && r.RTT == cmds[0].BHS.ITT():
				close(abortA)
			case r.Function == pdu.TMFLogicalUnitReset:
				return tg.Good(cmds[1]) // C's status, not the reset's
			default:
				t.Errorf("unexpected task management function %d for ITT 0x%x", r.Function, r.RTT)
			}
			return nil
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.CommandTimeout = time.Second; c.NOPInterval = -1 })
	if err != nil {
		t.Fatal(err)
	}
	read1 := func() *initiator.Command {
		return &initiator.Command{LUN: lun, CDB: []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, Read: make([]byte, 512)}
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		_, err := s.Do(ctxA, read1())
		errA <- err
	}()
	<-seen // A first: cmds[0]
	ctxC, cancelC := context.WithCancel(context.Background())
	defer cancelC()
	type outcome struct {
		r           *initiator.Result
		err         error
		sessionDown bool
	}
	outC := make(chan outcome, 1)
	go func() {
		r, err := s.Do(ctxC, read1())
		down := false
		select {
		case <-s.Done():
			down = true
		default:
		}
		outC <- outcome{r, err, down}
	}()
	<-seen
	cancelA()
	select {
	case <-abortA:
	case <-time.After(3 * time.Second):
		t.Fatal("no ABORT TASK for A")
	}
	cancelC() // C waits behind A's escalation on the same LUN
	o := <-outC
	if o.err != nil || o.r.Status != 0 {
		t.Errorf("C: %v %+v; want the GOOD status the target sent", o.err, o.r)
	}
	if o.sessionDown {
		t.Error("C returned only after A's escalation dropped the session, though its status had arrived")
	}
	<-errA
}
