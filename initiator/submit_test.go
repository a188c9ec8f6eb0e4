package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/isertest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// TestLateResponseForAReusedEntryIsDropped: with one command entry, the
// target swallows command A, completes the ABORT TASK for it, and answers
// command B (which reuses A's entry) only after sending a late CHECK
// CONDITION for A's ITT. The generation in the ITT tells the two uses
// apart: the late status is dropped and B gets its own GOOD status.
func TestLateResponseForAReusedEntryIsDropped(t *testing.T) {
	var mu sync.Mutex
	var ittA uint32
	var itts []uint32
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		switch req.BHS.Opcode() {
		case pdu.OpSCSICommand:
			mu.Lock()
			itts = append(itts, req.BHS.ITT())
			first := ittA == 0
			if first {
				ittA = req.BHS.ITT()
			}
			a := ittA
			mu.Unlock()
			if first {
				tg.Ack(req)
				return nil
			}
			late := pdu.SCSIResponse{ITT: a, Status: 0x02, TargetSNs: tg.SNs(true)}
			return append([]iscsitest.Reply{{PDU: pdu.NewPDU(&late, nil)}}, tg.Good(req)...)
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) {
		c.QueueDepth, c.CommandTimeout, c.NOPInterval = 1, 100*time.Millisecond, -1
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Do(ctx5(t), write10(make([]byte, 512))); !errors.Is(err, initiator.ErrTaskAborted) {
		t.Fatalf("A: %v; want ErrTaskAborted", err)
	}
	r, err := s.Do(ctx5(t), write10(make([]byte, 512)))
	if err != nil || r.Status != 0 {
		t.Fatalf("B: %v %+v; want GOOD (A's late status must not complete B)", err, r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(itts) != 2 || itts[0]&0xffff != itts[1]&0xffff || itts[0] == itts[1] {
		t.Fatalf("ITTs %#x; want the same entry with two generations", itts)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}

// counter is a CommandDone that counts the calls per tag.
type counter struct {
	mu    sync.Mutex
	calls map[initiator.Tag]int
	errs  []error
	wg    sync.WaitGroup
}

func (c *counter) CommandDone(tag initiator.Tag, r *initiator.Result, err error) {
	c.mu.Lock()
	c.calls[tag]++
	if err == nil && r.Status != 0 {
		err = errStatus
	}
	if err != nil {
		c.errs = append(c.errs, err)
	}
	c.mu.Unlock()
	c.wg.Done()
}

// TestSubmitCompletesEachCommandOnce: more commands than entries are
// submitted at once; the ones without an entry wait for one. Every
// CommandDone comes exactly once, and the target sees the commands in
// the order they were submitted, with consecutive CmdSNs.
func TestSubmitCompletesEachCommandOnce(t *testing.T) {
	var mu sync.Mutex
	var lbas []uint32
	var cmdSNs []uint32
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			var c pdu.SCSICommand
			_ = c.Unmarshal(&req.BHS)
			mu.Lock()
			lbas = append(lbas, uint32(c.CDB[2])<<24|uint32(c.CDB[3])<<16|uint32(c.CDB[4])<<8|uint32(c.CDB[5]))
			cmdSNs = append(cmdSNs, c.CmdSN)
			mu.Unlock()
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.QueueDepth, c.NOPInterval = 2, -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 40
	c := &counter{calls: map[initiator.Tag]int{}}
	c.wg.Add(n)
	for i := range n {
		cmd := write10(make([]byte, 512))
		cmd.CDB[5] = byte(i) // LBA i
		if err := s.Submit(cmd, c, initiator.Tag(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.wg.Wait()
	if len(c.errs) > 0 {
		t.Fatalf("errors: %v", c.errs)
	}
	for i := range n {
		if got := c.calls[initiator.Tag(i)]; got != 1 {
			t.Fatalf("tag %d completed %d times", i, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range lbas {
		if lbas[i] != uint32(i) || cmdSNs[i] != cmdSNs[0]+uint32(i) {
			t.Fatalf("target saw LBAs %v CmdSNs %v; want submission order", lbas, cmdSNs)
		}
	}
}

// doneAt is a CommandDone that records the outcome and whether the
// datamover's Close had completed when it came.
type doneAt struct {
	closed   chan struct{}
	err      error
	atClosed bool
	done     chan struct{}
}

func (d *doneAt) CommandDone(tag initiator.Tag, r *initiator.Result, err error) {
	d.err = err
	select {
	case <-d.closed:
		d.atClosed = true
	default:
	}
	close(d.done)
}

// TestSubmittedCommandReleasedOnlyAfterTeardown is the Submit variant of
// TestFailedSessionReleasesWaitersOnlyAfterTeardown: the CommandDone of a
// zero-copy read in flight when the keepalive fails the session comes only
// after the datamover's Close has completed, and the target writes nothing
// into the buffer after it.
func TestSubmittedCommandReleasedOnlyAfterTeardown(t *testing.T) {
	fc := isertest.NewConn(1024)
	fc.Target().SetTrickle(4 * time.Millisecond)
	inner, err := initiator.NewISERDatamover(fc, 16)
	if err != nil {
		t.Fatal(err)
	}
	dm := &slowTeardown{ISERDatamover: inner, delay: 100 * time.Millisecond, closed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.NewSession(ctx, dm, initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:fake", ISID: initiator.NewISID()},
		NOPInterval: 20 * time.Millisecond, NOPTimeout: 40 * time.Millisecond, QueueDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, initiator.MaxTransfer)
	if err := inner.RegisterIOBuffers(buf); err != nil {
		t.Fatal(err)
	}
	d := &doneAt{closed: dm.closed, done: make(chan struct{})}
	cmd := &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, initiator.MaxTransfer/512), Read: buf}
	if err := s.Submit(cmd, d, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		t.Fatal("no CommandDone")
	}
	if d.err == nil {
		t.Fatal("read succeeded; want the keepalive to end the session first")
	}
	if !d.atClosed {
		t.Fatalf("CommandDone (%v) came before the datamover's Close completed", d.err)
	}
	snap := bytes.Clone(buf)
	time.Sleep(300 * time.Millisecond)
	if !bytes.Equal(snap, buf) {
		t.Fatal("the target wrote into the read buffer after CommandDone")
	}
	if err := s.Submit(cmd, d, 1); err == nil {
		t.Fatal("Submit on an ended session succeeded")
	}
}

// TestSubmitWaitsForTheWindowInOrder: the target's window is one command
// and it answers each command a little later; commands submitted at once
// wait for the window in a FIFO and go out in submission order, one CmdSN
// after the other.
func TestSubmitWaitsForTheWindowInOrder(t *testing.T) {
	var mu sync.Mutex
	var lbas []byte
	s, _, err := loginTo(t, func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpLoginReq {
			tg.Window = 1
			return tg.Login(req, iscsitest.LoginOptions{})
		}
		if req.BHS.Opcode() == pdu.OpSCSICommand {
			var c pdu.SCSICommand
			_ = c.Unmarshal(&req.BHS)
			mu.Lock()
			lbas = append(lbas, c.CDB[5])
			mu.Unlock()
			r := tg.Good(req)
			r[0].Delay = time.Millisecond
			return r
		}
		return tg.Good(req)
	}, func(c *initiator.SessionConfig) { c.QueueDepth, c.NOPInterval = 8, -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 20
	c := &counter{calls: map[initiator.Tag]int{}}
	c.wg.Add(n)
	for i := range n {
		cmd := write10(make([]byte, 512))
		cmd.CDB[5] = byte(i)
		if err := s.Submit(cmd, c, initiator.Tag(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.wg.Wait()
	if len(c.errs) > 0 {
		t.Fatalf("errors: %v", c.errs)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, lba := range lbas {
		if lba != byte(i) {
			t.Fatalf("target saw LBAs %v; want submission order", lbas)
		}
	}
	if len(lbas) != n {
		t.Fatalf("target saw %d commands", len(lbas))
	}
}

// TestSubmittedCommandTimesOutAndIsAborted: a swallowed command started
// with Submit times out; the error handling aborts it and its CommandDone
// reports ErrCommandTimeout and ErrTaskAborted, once; the session stays.
func TestSubmittedCommandTimesOutAndIsAborted(t *testing.T) {
	var log pduLog
	swallowed := false
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		log.add(0, req)
		if req.BHS.Opcode() == pdu.OpSCSICommand && !swallowed {
			swallowed = true
			tg.Ack(req)
			return nil
		}
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.CommandTimeout, c.NOPInterval = 100*time.Millisecond, -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o := make(outcomes, 2)
	if err := s.Submit(write10(make([]byte, 512)), o, 3); err != nil {
		t.Fatal(err)
	}
	x := o.next(t)
	if !errors.Is(x.err, initiator.ErrCommandTimeout) || !errors.Is(x.err, initiator.ErrTaskAborted) {
		t.Fatalf("CommandDone: %v; want a timeout ended by ABORT TASK", x.err)
	}
	select {
	case x := <-o:
		t.Fatalf("a second CommandDone: %+v", x)
	case <-time.After(50 * time.Millisecond):
	}
	if got := log.get(0); len(got) != 2 || got[1][:6] != "abort " {
		t.Fatalf("target saw %q; want the command and ABORT TASK", got)
	}
	if err := s.Err(); err != nil || s.CommandTimeouts() != 1 {
		t.Fatalf("session: %v, %d timeouts; want up with one", err, s.CommandTimeouts())
	}
}

// TestISERSubmitReadsThroughBounceSlots: over the fake iSER target, 64
// reads submitted at once into unregistered buffers go through bounce
// slots reserved before each command's CmdSN; every buffer ends up with its
// blocks.
func TestISERSubmitReadsThroughBounceSlots(t *testing.T) {
	s, _, fc := iserSessionDepth(t, 1024, 8)
	disk := fc.Target().Disk()
	for i := range disk {
		disk[i] = byte(i/512 + 1)
	}
	const n = 64
	bufs := make([][]byte, n)
	c := &counter{calls: map[initiator.Tag]int{}}
	c.wg.Add(n)
	for i := range n {
		bufs[i] = make([]byte, 4096)
		cmd := &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, uint64(i*8), 8), Read: bufs[i]}
		if err := s.Submit(cmd, c, initiator.Tag(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.wg.Wait()
	if len(c.errs) > 0 {
		t.Fatalf("%d errors, first %v", len(c.errs), c.errs[0])
	}
	for i := range n {
		if !bytes.Equal(bufs[i], disk[i*4096:(i+1)*4096]) {
			t.Fatalf("read %d: wrong data", i)
		}
	}
}
