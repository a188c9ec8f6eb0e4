package initiator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/isertest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// cmdTimeout is the test-shortened command timeout.
const cmdTimeout = 100 * time.Millisecond

// pduLog records, per connection, the SCSI commands and task management
// requests a fake target received.
type pduLog struct {
	mu   sync.Mutex
	seen map[int][]string
}

// swallowFirstCommand is a fake target's handler that acknowledges the
// first SCSI command it sees and never answers it, and hands every other
// request to h. One handler may serve several connections.
func swallowFirstCommand(h iscsitest.Handler) iscsitest.Handler {
	var swallowed atomic.Bool
	return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand && swallowed.CompareAndSwap(false, true) {
			tg.Ack(req)
			return nil
		}
		return h(tg, req)
	}
}

// tmfRequest decodes the Task Management Function Request req.
func tmfRequest(req *pdu.PDU) pdu.TaskMgmtRequest {
	var r pdu.TaskMgmtRequest
	_ = r.Unmarshal(&req.BHS)
	return r
}

// tmfReply is the fake target's Task Management Function Response to the
// TMF with task tag itt; response is RFC 7143's code (0 function complete,
// 1 task does not exist, 5 function rejected).
func tmfReply(tg *iscsitest.Target, itt uint32, response uint8) iscsitest.Reply {
	resp := pdu.TaskMgmtResponse{Response: response, ITT: itt, TargetSNs: tg.SNs(true)}
	return iscsitest.Reply{PDU: pdu.NewPDU(&resp, nil)}
}

func (l *pduLog) add(conn int, req *pdu.PDU) {
	var s string
	switch req.BHS.Opcode() {
	case pdu.OpSCSICommand:
		var c pdu.SCSICommand
		_ = c.Unmarshal(&req.BHS)
		s = fmt.Sprintf("scsi itt=%d cmdsn=%d", c.ITT, c.CmdSN)
	case pdu.OpTaskMgmtReq:
		r := tmfRequest(req)
		switch r.Function {
		case pdu.TMFAbortTask:
			s = fmt.Sprintf("abort rtt=%d refcmdsn=%d", r.RTT, r.RefCmdSN)
		case pdu.TMFLogicalUnitReset:
			s = "lu-reset"
		default:
			s = fmt.Sprintf("tmf %d", r.Function)
		}
	default:
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[int][]string{}
	}
	l.seen[conn] = append(l.seen[conn], s)
}

func (l *pduLog) get(conn int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen[conn]...)
}

// withCommandTimeout shortens the command timeout and keeps the keepalive
// running (the targets below answer NOP-Outs: the session stays "up").
func withCommandTimeout(c *initiator.NexusConfig) {
	c.Session.CommandTimeout = cmdTimeout
	c.Session.NOPInterval = 20 * time.Millisecond
	c.Session.NOPTimeout = 5 * time.Second
}

// TestNexusDroppedCommandEscalatesToSessionDrop: the first connection
// answers NOP-Outs but swallows SCSI commands and task management
// requests. The command times out; the target sees ABORT TASK for it, then
// LOGICAL UNIT RESET, then the session is dropped and the command is
// reissued on a reinstated session, where it succeeds.
func TestNexusDroppedCommandEscalatesToSessionDrop(t *testing.T) {
	var log pduLog
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			log.add(n, req)
			op := req.BHS.Opcode()
			if n == 0 && (op == pdu.OpSCSICommand || op == pdu.OpTaskMgmtReq) {
				tg.Ack(req)
				return nil
			}
			return tg.Good(req)
		}
	}}
	nx := dialNexus(t, f, withCommandTimeout)
	// Within ctx5: a few command timeouts, not the 5 s the test allows.
	r, err := nx.Do(ctx5(t), write10(make([]byte, 512)))
	if err != nil || r.Status != 0 {
		t.Fatalf("write: %v %+v", err, r)
	}
	c0 := log.get(0)
	if len(c0) != 3 || !strings.HasPrefix(c0[0], "scsi ") || c0[2] != "lu-reset" {
		t.Fatalf("first connection saw %q; want the command, ABORT TASK, LOGICAL UNIT RESET", c0)
	}
	var itt, cmdSN uint32
	fmt.Sscanf(c0[0], "scsi itt=%d cmdsn=%d", &itt, &cmdSN)
	if want := fmt.Sprintf("abort rtt=%d refcmdsn=%d", itt, cmdSN); c0[1] != want {
		t.Fatalf("abort %q, want %q", c0[1], want)
	}
	if c1 := log.get(1); len(c1) != 1 || !strings.HasPrefix(c1[0], "scsi ") {
		t.Fatalf("second connection saw %q; want the reissued command", c1)
	}
	st := nx.Status()
	if st.Faults != 1 || st.Recoveries != 1 || st.CommandTimeouts != 1 {
		t.Fatalf("status %+v; want 1 fault, 1 recovery, 1 command timeout", st)
	}
	if st.LastError == nil || !strings.Contains(st.LastError.Error(), "dropping the session") {
		t.Fatalf("last error %v", st.LastError)
	}
}

// TestNexusAbortedCommandIsReissued: the target swallows the first command
// but completes ABORT TASK; the command is issued again on the same
// session, without a reset or a reconnect.
func TestNexusAbortedCommandIsReissued(t *testing.T) {
	var log pduLog
	target := swallowFirstCommand(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply { return tg.Good(req) })
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			log.add(n, req)
			return target(tg, req)
		}
	}}
	nx := dialNexus(t, f, withCommandTimeout)
	if r, err := nx.Do(ctx5(t), write10(make([]byte, 512))); err != nil || r.Status != 0 {
		t.Fatalf("write: %v %+v", err, r)
	}
	c0 := log.get(0)
	if len(c0) != 3 || !strings.HasPrefix(c0[1], "abort ") || !strings.HasPrefix(c0[2], "scsi ") || c0[0] == c0[2] {
		t.Fatalf("target saw %q; want the command, ABORT TASK, the command again with a new ITT", c0)
	}
	st := nx.Status()
	if len(f.conns()) != 1 || st.Faults != 0 || st.CommandTimeouts != 1 {
		t.Fatalf("status %+v over %d connections; want 1 command timeout, no fault", st, len(f.conns()))
	}
}

// TestNexusCommandThatAlwaysTimesOutGetsEIO: every connection swallows SCSI
// commands and task management requests; the command ends with EIO after
// a bounded number of attempts, each ending in a session drop.
func TestNexusCommandThatAlwaysTimesOutGetsEIO(t *testing.T) {
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			if op := req.BHS.Opcode(); op == pdu.OpSCSICommand || op == pdu.OpTaskMgmtReq {
				tg.Ack(req)
				return nil
			}
			return tg.Good(req)
		}
	}}
	nx := dialNexus(t, f, withCommandTimeout)
	_, err := nx.Do(ctx5(t), write10(make([]byte, 512)))
	var en interface{ Errno() syscall.Errno }
	if !errors.Is(err, initiator.ErrCommandTimeout) || !errors.As(err, &en) || en.Errno() != syscall.EIO {
		t.Fatalf("write to a target that drops it: %v; want a command timeout as EIO", err)
	}
	if st := nx.Status(); st.CommandTimeouts != 3 || st.Faults < 3 {
		t.Fatalf("status %+v; want 3 command timeouts, each dropping a session", st)
	}
}

// TestNexusClosedWindowLeadsToRecovery: the first connection keeps MaxCmdSN
// below the next CmdSN (while answering NOP-Outs); after the command
// timeout the session is dropped and the command runs on the next one.
func TestNexusClosedWindowLeadsToRecovery(t *testing.T) {
	var log pduLog
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			log.add(n, req)
			return tg.Good(req)
		}
	}}
	f.setup = func(n int, tg *iscsitest.Target) {
		if n == 0 {
			tg.Window = 0 // MaxCmdSN = ExpCmdSN - 1 from the login on
		}
	}
	nx := dialNexus(t, f, withCommandTimeout)
	if r, err := nx.Do(ctx5(t), write10(make([]byte, 512))); err != nil || r.Status != 0 {
		t.Fatalf("write: %v %+v", err, r)
	}
	if c0 := log.get(0); len(c0) != 0 {
		t.Fatalf("the closed window let %q through", c0)
	}
	st := nx.Status()
	if st.Faults != 1 || st.CommandTimeouts != 1 || !errors.Is(st.LastError, initiator.ErrWindowClosed) {
		t.Fatalf("status %+v; want one fault for the closed window", st)
	}
}

// TestNexusLUNResetEndsEveryTaskOnTheLUN: the target swallows two
// commands and refuses ABORT TASK but completes LOGICAL UNIT RESET. The
// reset ends both tasks at the target, so both are reissued at once (the
// second without waiting for its own timeout), on the same session.
func TestNexusLUNResetEndsEveryTaskOnTheLUN(t *testing.T) {
	var log pduLog
	var mu sync.Mutex
	commands := 0
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			log.add(n, req)
			switch req.BHS.Opcode() {
			case pdu.OpSCSICommand:
				mu.Lock()
				commands++
				swallow := commands <= 2
				mu.Unlock()
				if swallow {
					tg.Ack(req)
					return nil
				}
			case pdu.OpTaskMgmtReq:
				if r := tmfRequest(req); r.Function == pdu.TMFAbortTask {
					return []iscsitest.Reply{tmfReply(tg, r.ITT, 5)}
				}
			}
			return tg.Good(req)
		}
	}}
	nx := dialNexus(t, f, func(c *initiator.NexusConfig) {
		withCommandTimeout(c)
		c.Session.CommandTimeout = time.Second
	})
	errc := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := nx.Do(ctx5(t), write10(make([]byte, 512)))
			errc <- err
		}()
		if i == 0 {
			time.Sleep(400 * time.Millisecond) // the second would time out later
		}
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	var aborts, resets, scsi int
	for _, s := range log.get(0) {
		switch {
		case strings.HasPrefix(s, "abort "):
			aborts++
		case s == "lu-reset":
			resets++
		case strings.HasPrefix(s, "scsi "):
			scsi++
		}
	}
	st := nx.Status()
	if aborts != 1 || resets != 1 || scsi != 4 || st.CommandTimeouts != 1 || st.Faults != 0 || len(f.conns()) != 1 {
		t.Fatalf("target saw %q; status %+v; want one ABORT TASK, one LOGICAL UNIT RESET, both commands reissued on the same session",
			log.get(0), st)
	}
}

// TestCancelledCommandWhoseAbortFailsDropsTheSession: the caller gives up
// on a command the target swallowed, and the target answers neither ABORT
// TASK nor LOGICAL UNIT RESET. The task may still be running, so Do must
// not hand the buffer back yet: the session is dropped and Do returns the
// caller's error once the connection is torn down.
func TestCancelledCommandWhoseAbortFailsDropsTheSession(t *testing.T) {
	var log pduLog
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		log.add(0, req)
		if op := req.BHS.Opcode(); op == pdu.OpSCSICommand || op == pdu.OpTaskMgmtReq {
			tg.Ack(req)
			return nil
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.CommandTimeout = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := read(ctx, s, 512); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if s.Err() == nil {
		t.Fatal("Do returned while the session that may still run the task is up")
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("session not ended")
	}
	if got := log.get(0); len(got) != 3 || got[1][:6] != "abort " || got[2] != "lu-reset" {
		t.Fatalf("target saw %q; want the command, ABORT TASK, LOGICAL UNIT RESET", got)
	}
}

// TestISERAbortedCommandsGiveTheirBounceSlotsBack: over iSER a command's
// buffer outside registered memory is bounced through a data slot. When
// ABORT TASK completes, the target is done with the slot (its response
// follows the task's RDMA on the connection), so the slot is reused:
// more commands than there are slots can time out and be aborted without
// the datamover running out of them.
func TestISERAbortedCommandsGiveTheirBounceSlotsBack(t *testing.T) {
	fc := isertest.NewConn(64)
	dm, err := initiator.NewISERDatamover(fc, 4) // 4 + 8 spare data slots
	if err != nil {
		t.Fatal(err)
	}
	s, err := initiator.NewSession(ctx5(t), dm, initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:fake", ISID: initiator.NewISID()},
		NOPInterval: -1, QueueDepth: 4, CommandTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 20
	fc.Target().Swallow(n)
	buf := make([]byte, 512)
	for i := range n {
		_, err := s.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, 1), Read: buf})
		if !errors.Is(err, initiator.ErrCommandTimeout) || !errors.Is(err, initiator.ErrTaskAborted) {
			t.Fatalf("swallowed command %d: %v; want a timeout ended by ABORT TASK", i, err)
		}
	}
	if r, err := s.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, 1), Read: buf}); err != nil || r.Status != 0 {
		t.Fatalf("read after %d aborted commands: %v %+v", n, err, r)
	}
	if s.Err() != nil || s.CommandTimeouts() != n {
		t.Fatalf("session error %v, %d command timeouts; want the session up after %d timeouts", s.Err(), s.CommandTimeouts(), n)
	}
	if v := fc.Violations(); len(v) > 0 {
		t.Fatalf("peer would refuse: %v", v)
	}
}
