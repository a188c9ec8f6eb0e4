package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

func loginTo(t *testing.T, h iscsitest.Handler, mod func(*initiator.SessionConfig)) (*initiator.Session, *iscsitest.Target, error) {
	t.Helper()
	conn, tgt := iscsitest.Pipe(t, h)
	dm := initiator.NewTCPDatamover(conn)
	cfg := initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:tgt", ISID: initiator.NewISID()},
		NOPInterval: -1, QueueDepth: 8}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.NewSession(ctx, dm, cfg)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, tgt, err
}

// withLogin handles login with defaults, then calls ffp.
func withLogin(ffp func(t *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply) iscsitest.Handler {
	return func(t *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpLoginReq {
			return t.Login(req, iscsitest.LoginOptions{})
		}
		return ffp(t, req)
	}
}

func read(ctx context.Context, s *initiator.Session, n int) (*initiator.Result, []byte, error) {
	buf := make([]byte, n)
	r, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: []byte{0x28, 0, 0, 0, 0, 0, 0, 0, byte(n / 512), 0}, Read: buf})
	return r, buf, err
}

func ctx5(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLoginAndReadWithDataIn(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1024 bytes in two Data-In
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() != pdu.OpSCSICommand {
			return tg.Good(req)
		}
		tg.Ack(req)
		itt := req.BHS.ITT()
		d1 := pdu.DataIn{ITT: itt, TTT: 0xffffffff, DataSN: 0, BufferOffset: 0}
		d2 := pdu.DataIn{Final: true, HasStatus: true, ITT: itt, TTT: 0xffffffff, DataSN: 1,
			BufferOffset: 512, TargetSNs: tg.SNs(true)}
		return []iscsitest.Reply{{PDU: pdu.NewPDU(&d1, want[:512])}, {PDU: pdu.NewPDU(&d2, want[512:])}}
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, got, err := read(ctx5(t), s, 1024)
	if err != nil || r.Status != 0 {
		t.Fatalf("read: %v %+v", err, r)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("data differs")
	}
}

func TestWriteAnswersR2T(t *testing.T) {
	data := make([]byte, 1<<20) // more than the immediate-data limit
	for i := range data {
		data[i] = byte(i * 7)
	}
	var got bytes.Buffer
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		switch req.BHS.Opcode() {
		case pdu.OpSCSICommand:
			tg.Ack(req)
			got.Write(req.Data) // immediate data
			r2t := pdu.R2T{ITT: req.BHS.ITT(), TTT: 0x55, TargetSNs: tg.SNs(false),
				BufferOffset: uint32(len(req.Data)), DesiredDataTransferLength: uint32(len(data) - len(req.Data))}
			return []iscsitest.Reply{{PDU: pdu.NewPDU(&r2t, nil)}}
		case pdu.OpDataOut:
			var d pdu.DataOut
			_ = d.Unmarshal(&req.BHS)
			if d.TTT != 0x55 {
				t.Errorf("Data-Out TTT %#x", d.TTT)
			}
			if int(d.BufferOffset) != got.Len() {
				t.Errorf("Data-Out offset %d, have %d", d.BufferOffset, got.Len())
			}
			got.Write(req.Data)
			if d.Final {
				r := pdu.SCSIResponse{ITT: d.ITT, TargetSNs: tg.SNs(true)}
				return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, nil)}}
			}
			return nil
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 128, 0}, Write: data})
	if err != nil || r.Status != 0 {
		t.Fatalf("write: %v %+v", err, r)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("target got %d bytes, differing", got.Len())
	}
}

func TestLoginFailureInWords(t *testing.T) {
	_, _, err := loginTo(t, func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		return tg.Login(req, iscsitest.LoginOptions{StatusClass: 2, StatusDetail: 3})
	}, nil)
	var le *initiator.LoginError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "target not found") {
		t.Fatalf("err = %v", err)
	}
	_, _, err = loginTo(t, func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		return tg.Login(req, iscsitest.LoginOptions{StatusClass: 2, StatusDetail: 1})
	}, nil)
	if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoginRejectsIllegalAnswer(t *testing.T) {
	// MaxBurstLength is numerical-min: answering more than offered is illegal.
	_, _, err := loginTo(t, func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		return tg.Login(req, iscsitest.LoginOptions{Keys: []textkey.KV{{Key: "MaxBurstLength", Value: "99999999"}}})
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "MaxBurstLength") {
		t.Fatalf("err = %v", err)
	}
}

// expectEnd waits for the session to end and returns its error.
func expectEnd(t *testing.T, s *initiator.Session) error {
	t.Helper()
	select {
	case <-s.Done():
		return s.Err()
	case <-time.After(5 * time.Second):
		t.Fatal("session did not end")
		return nil
	}
}

func TestMalformedPDUEndsSession(t *testing.T) {
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			raw := make([]byte, 48)
			raw[0] = 0x3b // not an opcode
			return []iscsitest.Reply{{Raw: raw}}
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = read(ctx5(t), s, 512)
	var pe *pdu.ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("read error %v, want a protocol error", err)
	}
	if err := expectEnd(t, s); !errors.As(err, &pe) {
		t.Fatalf("session error %v", err)
	}
}

func TestOutOfWindowStatSN(t *testing.T) {
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			tg.Ack(req)
			sn := tg.SNs(true)
			sn.StatSN += 1 << 20
			r := pdu.SCSIResponse{ITT: req.BHS.ITT(), TargetSNs: sn}
			return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, nil)}}
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err = read(ctx5(t), s, 512); err == nil || !strings.Contains(err.Error(), "out of window") {
		t.Fatalf("read error %v", err)
	}
}

func TestRejectFailsOnlyThatCommand(t *testing.T) {
	var n atomic.Int32
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand && n.Add(1) == 1 {
			tg.Ack(req)
			r := pdu.Reject{Reason: 0x05, TargetSNs: tg.SNs(true)}
			return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, req.BHS[:])}}
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = read(ctx5(t), s, 512)
	var re *initiator.RejectError
	if !errors.As(err, &re) || re.Reason != 0x05 {
		t.Fatalf("first command: %v", err)
	}
	if _, _, err := read(ctx5(t), s, 512); err != nil {
		t.Fatalf("second command after a reject: %v", err)
	}
}

func TestTargetRequestsLogout(t *testing.T) {
	s, tg, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpNOPOut {
			a := pdu.AsyncMessage{AsyncEvent: pdu.AsyncLogoutRequest, Parameter3: 1, TargetSNs: tg.SNs(true)}
			return append(tg.Good(req), iscsitest.Reply{PDU: pdu.NewPDU(&a, nil)})
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	if err := expectEnd(t, s); !errors.Is(err, initiator.ErrTargetLogout) {
		t.Fatalf("session error %v", err)
	}
	var logout bool
	for _, p := range tg.Seen() {
		logout = logout || p.BHS.Opcode() == pdu.OpLogoutReq
	}
	if !logout {
		t.Fatal("no Logout Request sent")
	}
}

func TestDataInBeyondBufferIsProtocolError(t *testing.T) {
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			tg.Ack(req)
			d := pdu.DataIn{Final: true, HasStatus: true, ITT: req.BHS.ITT(), TTT: 0xffffffff,
				BufferOffset: 256, TargetSNs: tg.SNs(true)}
			return []iscsitest.Reply{{PDU: pdu.NewPDU(&d, make([]byte, 512))}}
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := read(ctx5(t), s, 512); err == nil || !strings.Contains(err.Error(), "beyond") {
		t.Fatalf("read error %v", err)
	}
}

func TestShortDataInIsAnError(t *testing.T) {
	// GOOD status with no residual but only half the data: never zeros.
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			tg.Ack(req)
			d := pdu.DataIn{Final: true, HasStatus: true, ITT: req.BHS.ITT(), TTT: 0xffffffff, TargetSNs: tg.SNs(true)}
			return []iscsitest.Reply{{PDU: pdu.NewPDU(&d, make([]byte, 512))}}
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := read(ctx5(t), s, 1024); err == nil {
		t.Fatal("short Data-In accepted")
	}
}

func TestAnswersTargetPing(t *testing.T) {
	got := make(chan pdu.NOPOut, 1)
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpNOPOut {
			var n pdu.NOPOut
			_ = n.Unmarshal(&req.BHS)
			if n.ITT == 0xffffffff {
				got <- n
				return nil
			}
			ping := pdu.NOPIn{ITT: 0xffffffff, TTT: 0x77, TargetSNs: tg.SNs(false)}
			return append(tg.Good(req), iscsitest.Reply{PDU: pdu.NewPDU(&ping, nil)})
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n.TTT != 0x77 || !n.Immediate {
			t.Fatalf("answer %+v", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("target's NOP-In ping not answered")
	}
}

func TestKeepaliveTimeout(t *testing.T) {
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		return nil // never answers
	}), func(c *initiator.SessionConfig) {
		c.NOPInterval, c.NOPTimeout = 50*time.Millisecond, 100*time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := expectEnd(t, s); err == nil || !strings.Contains(err.Error(), "keepalive") {
		t.Fatalf("session error %v", err)
	}
}

func TestCmdSNWindowWaits(t *testing.T) {
	// The target advertises a window of one command and opens it again only
	// when the outstanding one completes: the second must not be sent early.
	var inFlight, maxInFlight atomic.Int32
	release := make(chan struct{})
	s, tg, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			if v := inFlight.Add(1); v > maxInFlight.Load() {
				maxInFlight.Store(v)
			}
			<-release
			inFlight.Add(-1)
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	tg.Window = 1
	if err := s.Ping(ctx5(t)); err != nil { // carries the window of 1
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, _, err := read(ctx5(t), s, 512); errs <- err }()
	}
	for range 3 {
		time.Sleep(50 * time.Millisecond)
		release <- struct{}{}
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if maxInFlight.Load() != 1 {
		t.Fatalf("%d commands in flight with a window of 1", maxInFlight.Load())
	}
}

func TestCancelSendsAbortTask(t *testing.T) {
	aborted := make(chan uint32, 1)
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		switch req.BHS.Opcode() {
		case pdu.OpSCSICommand:
			tg.Ack(req)
			return nil // never completes
		case pdu.OpTaskMgmtReq:
			var r pdu.TaskMgmtRequest
			_ = r.Unmarshal(&req.BHS)
			if r.Function == pdu.TMFAbortTask {
				aborted <- r.RTT
			}
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := read(ctx, s, 512); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	select {
	case <-aborted:
	case <-time.After(5 * time.Second):
		t.Fatal("no ABORT TASK")
	}
}

func TestCloseUnblocksWaiters(t *testing.T) {
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			return nil
		}
		return tg.Good(req)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, _, err := read(context.Background(), s, 512); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	go s.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("command succeeded after close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock a waiting command")
	}
	s.Close() // idempotent
}

func TestTextContinuation(t *testing.T) {
	// SendTargets answered in two Text Responses: C=1 then F=1, with a key
	// split across the boundary.
	full := textkey.Encode([]textkey.KV{{Key: "TargetName", Value: "iqn.2026-11.test:a"},
		{Key: "TargetAddress", Value: "10.0.0.1:3260,1"}, {Key: "TargetName", Value: "iqn.2026-11.test:b"}})
	cut := 25
	var sawContinue atomic.Bool
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() != pdu.OpTextReq {
			return tg.Good(req)
		}
		tg.Ack(req)
		var tr pdu.TextRequest
		_ = tr.Unmarshal(&req.BHS)
		if tr.TTT == 0xffffffff {
			r := pdu.TextResponse{Continue: true, ITT: tr.ITT, TTT: 0x1234, TargetSNs: tg.SNs(true)}
			return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, full[:cut])}}
		}
		if tr.TTT != 0x1234 || len(req.Data) != 0 {
			t.Errorf("continuation request TTT %#x with %d bytes", tr.TTT, len(req.Data))
		}
		sawContinue.Store(true)
		r := pdu.TextResponse{Final: true, ITT: tr.ITT, TTT: 0xffffffff, TargetSNs: tg.SNs(true)}
		return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, full[cut:])}}
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := s.Text(ctx5(t), []textkey.KV{{Key: "SendTargets", Value: "All"}})
	if err != nil {
		t.Fatal(err)
	}
	if !sawContinue.Load() || len(kvs) != 3 || kvs[2].Value != "iqn.2026-11.test:b" {
		t.Fatalf("keys %v", kvs)
	}
}
