package initiator_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// marshaler is what pdu.NewPDU takes.
type marshaler interface{ Marshal(*pdu.BHS) }

// loopDM is a datamover whose target lives inside it: it logs in and
// answers every SCSI command with GOOD status at once, reusing one
// response PDU per task index, so that it allocates nothing per command
// and the session's own allocations can be counted.
type loopDM struct {
	mu       sync.Mutex
	statSN   uint32
	expCmdSN uint32
	resps    [256]pdu.PDU // by task index (the ITT's low bits; sessions here have fewer entries)
	q        chan *pdu.PDU
	closed   chan struct{}
	once     sync.Once
}

func newLoopDM() *loopDM {
	return &loopDM{q: make(chan *pdu.PDU, 1024), closed: make(chan struct{})}
}

func (d *loopDM) sns() pdu.TargetSNs {
	s := pdu.TargetSNs{StatSN: d.statSN, ExpCmdSN: d.expCmdSN, MaxCmdSN: d.expCmdSN + 63}
	d.statSN++
	return s
}

func (d *loopDM) SendPDU(p *pdu.PDU) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var r marshaler
	var data []byte
	switch p.BHS.Opcode() {
	case pdu.OpLoginReq:
		var lr pdu.LoginRequest
		if err := lr.Unmarshal(&p.BHS); err != nil {
			return err
		}
		d.expCmdSN = lr.CmdSN
		kvs, _ := textkey.Parse(p.Data)
		var out []textkey.KV
		if lr.CSG == pdu.StageSecurity {
			out = append(out, textkey.KV{Key: "TargetPortalGroupTag", Value: "1"})
			if _, ok := textkey.Get(kvs, "AuthMethod"); ok {
				out = append(out, textkey.KV{Key: "AuthMethod", Value: "None"})
			}
		} else {
			out = kvs
		}
		r = &pdu.LoginResponse{Transit: lr.Transit, CSG: lr.CSG, NSG: lr.NSG, ISID: lr.ISID,
			TSIH: 7, ITT: lr.ITT, TargetSNs: d.sns()}
		data = textkey.Encode(out)
	case pdu.OpNOPOut:
		r = &pdu.NOPIn{ITT: p.BHS.ITT(), TTT: pdu.ReservedTag, TargetSNs: d.sns()}
	case pdu.OpTaskMgmtReq:
		r = &pdu.TaskMgmtResponse{ITT: p.BHS.ITT(), TargetSNs: d.sns()}
	case pdu.OpLogoutReq:
		d.expCmdSN++
		r = &pdu.LogoutResponse{ITT: p.BHS.ITT(), TargetSNs: d.sns()}
	default:
		return errors.New("loopDM: unexpected " + p.BHS.Opcode().String())
	}
	d.q <- pdu.NewPDU(r, data)
	return nil
}

func (d *loopDM) SendCommand(cmd *pdu.SCSICommand, t *initiator.Task) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expCmdSN = cmd.CmdSN + 1
	resp := pdu.SCSIResponse{ITT: cmd.ITT, TargetSNs: d.sns()}
	p := &d.resps[cmd.ITT&0xff]
	p.BHS = pdu.BHS{}
	resp.Marshal(&p.BHS)
	select {
	case d.q <- p:
	case <-d.closed:
	}
	return nil
}

func (d *loopDM) Recv() (*pdu.PDU, error) {
	select {
	case p := <-d.q:
		return p, nil
	case <-d.closed:
		return nil, net.ErrClosed
	}
}

func (d *loopDM) TaskDone(t *initiator.Task)                                    {}
func (d *loopDM) OperationalKeys(n *textkey.Negotiation, want initiator.Params) {}
func (d *loopDM) AllocateConnectionResources(p initiator.Params) error          { return nil }
func (d *loopDM) NoticeKeyValues(p initiator.Params) error                      { return nil }
func (d *loopDM) Transport() string                                             { return "loop" }
func (d *loopDM) RemoteAddr() string                                            { return "loop" }
func (d *loopDM) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

func loopSession(t *testing.T, depth int) *initiator.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.NewSession(ctx, newLoopDM(), initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:loop", ISID: initiator.NewISID()},
		NOPInterval: -1, QueueDepth: depth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// signal is a CommandDone that records the outcome and wakes a waiter.
type signal struct {
	ch     chan struct{}
	status uint8
	err    error
	calls  int
}

func (g *signal) CommandDone(tag initiator.Tag, r *initiator.Result, err error) {
	g.calls++
	g.err = err
	if r != nil {
		g.status = r.Status
	}
	g.ch <- struct{}{}
}

// TestSubmitAllocatesNothing: a command started with Submit and reported
// through its CommandDone costs the session no allocation (the datamover
// here allocates nothing per command either), and Do only the Result it
// returns.
func TestSubmitAllocatesNothing(t *testing.T) {
	s := loopSession(t, 4)
	cmd := initiator.Command{CDB: rw16(0x88, 0, 8), Read: make([]byte, 4096)}
	g := &signal{ch: make(chan struct{}, 1)}
	submit := func() {
		if err := s.Submit(&cmd, g, 1); err != nil {
			t.Fatal(err)
		}
		<-g.ch
		if g.err != nil || g.status != 0 {
			t.Fatalf("read: %v status %d", g.err, g.status)
		}
	}
	for range 100 {
		submit() // warm-up: the watchdog timer, the queues
	}
	if a := testing.AllocsPerRun(1000, submit); a != 0 {
		t.Errorf("Submit: %v allocations per command; want 0", a)
	}
	ctx := context.Background()
	do := func() {
		if r, err := s.Do(ctx, &cmd); err != nil || r.Status != 0 {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(1000, do); a > 1 {
		t.Errorf("Do: %v allocations per command; want at most 1 (the Result)", a)
	}
}
