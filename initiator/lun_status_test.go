package initiator_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// Tests of how the LUN turns a command's outcome (iSCSI Response, SCSI
// status, sense data, Data-In) into success or an errno.

const (
	diskBlocks    = 2048
	diskBlockSize = 512
)

// diskIO answers a READ(10), WRITE(10) or SYNCHRONIZE CACHE(10) sent to the
// fake disk; data is the write's immediate data.
type diskIO func(tg *iscsitest.Target, c *pdu.SCSICommand, data []byte) []iscsitest.Reply

// fakeDisk answers what OpenLUN sends for a 1 MiB LUN of 512-byte blocks
// (no VPD pages, no mode pages) and hands reads, writes and flushes to rw.
func fakeDisk(t *testing.T, rw diskIO) iscsitest.Handler {
	return withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() != pdu.OpSCSICommand {
			return tg.Good(req)
		}
		tg.Ack(req)
		var c pdu.SCSICommand
		if err := c.Unmarshal(&req.BHS); err != nil {
			t.Errorf("fake disk: %v", err)
			return nil
		}
		switch c.CDB[0] {
		case 0x00: // TEST UNIT READY
			return statusReply(tg, &c, scsi.StatusGood, nil)
		case 0x12: // INQUIRY
			if c.CDB[1]&0x01 != 0 { // EVPD: no pages
				return statusReply(tg, &c, scsi.StatusCheckCondition, illegalRequest())
			}
			inq := scsi.InquiryData{Version: 6, ResponseDataFormat: 2, CmdQue: true,
				Vendor: "TEST", Product: "DISK", Revision: "1"}
			return dataInGood(tg, &c, inq.Marshal())
		case 0x9e: // READ CAPACITY(16)
			rc := scsi.Capacity16{LastLBA: diskBlocks - 1, BlockLength: diskBlockSize}
			return dataInGood(tg, &c, rc.Marshal())
		case 0x28, 0x2a, 0x35: // READ(10), WRITE(10), SYNCHRONIZE CACHE(10)
			if c.Write && len(req.Data) != int(c.ExpectedDataTransferLength) {
				t.Errorf("fake disk: write of %d bytes came with %d bytes of immediate data",
					c.ExpectedDataTransferLength, len(req.Data))
			}
			return rw(tg, &c, req.Data)
		}
		return statusReply(tg, &c, scsi.StatusCheckCondition, illegalRequest())
	})
}

func illegalRequest() []byte {
	s := scsi.Sense{ResponseCode: scsi.SenseFixedCurrent, Key: scsi.KeyIllegalRequest, ASC: 0x20}
	return s.Marshal()
}

// senseSegment is a SCSI Response data segment holding sense.
func senseSegment(sense []byte) []byte {
	if sense == nil {
		return nil
	}
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(sense))), sense...)
}

// statusReply is a SCSI Response with status and sense; a read's data did
// not move unless the caller sent it before.
func statusReply(tg *iscsitest.Target, c *pdu.SCSICommand, st scsi.Status, sense []byte) []iscsitest.Reply {
	r := pdu.SCSIResponse{ITT: c.ITT, Status: uint8(st), TargetSNs: tg.SNs(true)}
	return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, senseSegment(sense))}}
}

// dataInGood sends data in one Data-In with GOOD status, residual set for
// the part of the expected length it does not cover.
func dataInGood(tg *iscsitest.Target, c *pdu.SCSICommand, data []byte) []iscsitest.Reply {
	data = data[:min(len(data), int(c.ExpectedDataTransferLength))]
	d := pdu.DataIn{Final: true, HasStatus: true, ITT: c.ITT, TTT: 0xffffffff, TargetSNs: tg.SNs(true)}
	if n := int(c.ExpectedDataTransferLength) - len(data); n > 0 {
		d.Underflow, d.ResidualCount = true, uint32(n)
	}
	return []iscsitest.Reply{{PDU: pdu.NewPDU(&d, data)}}
}

// dataInNoStatus sends data as one Data-In without status.
func dataInNoStatus(c *pdu.SCSICommand, data []byte) iscsitest.Reply {
	d := pdu.DataIn{Final: true, ITT: c.ITT, TTT: 0xffffffff}
	return iscsitest.Reply{PDU: pdu.NewPDU(&d, data)}
}

func openFakeDisk(t *testing.T, rw diskIO) (*initiator.Session, *iscsitest.Target, *initiator.LUN) {
	t.Helper()
	s, tg, err := loginTo(t, fakeDisk(t, rw), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := initiator.OpenLUN(ctx5(t), s, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s, tg, l
}

// errnoer is an error that carries the errno a block frontend reports.
type errnoer interface{ Errno() syscall.Errno }

// errnoOf is the errno a block frontend reports for err, 0 for none.
func errnoOf(err error) syscall.Errno {
	var e errnoer
	if errors.As(err, &e) {
		return e.Errno()
	}
	return 0
}

// lunOp is one of the LUN calls whose outcome the tests check.
type lunOp struct {
	name string
	op   byte
	run  func(ctx context.Context, l *initiator.LUN) error
}

var lunOps = []lunOp{
	{"write", 0x2a, func(ctx context.Context, l *initiator.LUN) error {
		return l.WriteAt(ctx, bytes.Repeat([]byte{0xa5}, 4096), 8192, false)
	}},
	{"read", 0x28, func(ctx context.Context, l *initiator.LUN) error {
		return l.ReadAt(ctx, make([]byte, 4096), 8192)
	}},
	{"flush", 0x35, func(ctx context.Context, l *initiator.LUN) error { return l.Flush(ctx) }},
	{"write (async)", 0x2a, func(ctx context.Context, l *initiator.LUN) error {
		return awaitIO(ctx, func(d blockdev.Done) { l.StartWrite(bytes.Repeat([]byte{0xa5}, 4096), 8192, false, d, 7) })
	}},
	{"read (async)", 0x28, func(ctx context.Context, l *initiator.LUN) error {
		return awaitIO(ctx, func(d blockdev.Done) { l.StartRead(make([]byte, 4096), 8192, d, 7) })
	}},
}

// ioWaiter is a blockdev.Done that a test waits on.
type ioWaiter chan error

func (w ioWaiter) IODone(tag uint32, err error) {
	if tag != 7 {
		err = fmt.Errorf("IODone with tag %d, started with 7", tag)
	}
	w <- err
}

// awaitIO starts an asynchronous request and waits for its end.
func awaitIO(ctx context.Context, start func(blockdev.Done)) error {
	w := make(ioWaiter, 2)
	start(w)
	select {
	case err := <-w:
		select {
		case <-w:
			return errors.New("IODone called twice")
		case <-time.After(20 * time.Millisecond):
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("no IODone: %w", ctx.Err())
	}
}

func countOps(tg []*pdu.PDU, op byte) int {
	n := 0
	for _, p := range tg {
		if p.BHS.Opcode() == pdu.OpSCSICommand {
			var c pdu.SCSICommand
			if c.Unmarshal(&p.BHS) == nil && c.CDB[0] == op {
				n++
			}
		}
	}
	return n
}

// A SCSI Response whose iSCSI Response is Target Failure fails the command
// with EIO even though its status byte reads GOOD (status is not valid
// then). The LUN retries it; the session stays up and serves the next
// command.
func TestLUNTargetFailureIsEIO(t *testing.T) {
	for _, op := range lunOps {
		t.Run(op.name, func(t *testing.T) {
			var fail atomic.Bool
			fail.Store(true)
			s, tg, l := openFakeDisk(t, func(tg *iscsitest.Target, c *pdu.SCSICommand, _ []byte) []iscsitest.Reply {
				var out []iscsitest.Reply
				if c.Read {
					// All the data arrives, then the target says it failed.
					out = append(out, dataInNoStatus(c, make([]byte, c.ExpectedDataTransferLength)))
				}
				r := pdu.SCSIResponse{ITT: c.ITT, Status: 0, TargetSNs: tg.SNs(true)}
				if fail.Load() {
					r.Response = pdu.RespTargetFailure
				}
				return append(out, iscsitest.Reply{PDU: pdu.NewPDU(&r, nil)})
			})
			err := op.run(ctx5(t), l)
			if err == nil {
				t.Fatal("target failure reported as success")
			}
			var re *initiator.ResponseError
			if !errors.As(err, &re) || re.Response != pdu.RespTargetFailure {
				t.Errorf("error %v does not carry the iSCSI response", err)
			}
			if e := errnoOf(err); e != syscall.EIO {
				t.Errorf("errno %v (%v), want EIO", e, err)
			}
			if n := countOps(tg.Seen(), op.op); n < 2 {
				t.Errorf("command sent %d times, want retries", n)
			}
			if s.Err() != nil {
				t.Fatalf("session failed: %v", s.Err())
			}
			fail.Store(false)
			if err := op.run(ctx5(t), l); err != nil {
				t.Fatalf("after the target recovered: %v", err)
			}
		})
	}
}

// A target failure is not a transport failure: the Nexus returns it
// without logging in again or reissuing the command on another session.
func TestNexusDoesNotReissueTargetFailure(t *testing.T) {
	var cmds atomic.Int32
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			if req.BHS.Opcode() != pdu.OpSCSICommand {
				return tg.Good(req)
			}
			cmds.Add(1)
			tg.Ack(req)
			r := pdu.SCSIResponse{ITT: req.BHS.ITT(), Response: pdu.RespTargetFailure, TargetSNs: tg.SNs(true)}
			return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, nil)}}
		}
	}}
	nx := dialNexus(t, f, nil)
	r, err := nx.Do(ctx5(t), write10(make([]byte, 1024)))
	var re *initiator.ResponseError
	if !errors.As(err, &re) || r != nil {
		t.Fatalf("Do = %+v, %v; want a *ResponseError", r, err)
	}
	if n := len(f.conns()); n != 1 || cmds.Load() != 1 {
		t.Fatalf("%d connections, %d commands; want the one command on the one session", n, cmds.Load())
	}
}

// CHECK CONDITION with a current RECOVERED ERROR is a completed command:
// reads, writes and flushes succeed, and a read returns its data.
func TestLUNRecoveredErrorIsSuccess(t *testing.T) {
	recovered := scsi.Sense{ResponseCode: scsi.SenseFixedCurrent, Key: scsi.KeyRecoveredError, ASC: 0x17, ASCQ: 0x01}
	want := bytes.Repeat([]byte("recovered data. "), 4096/16)
	var written []byte
	_, _, l := openFakeDisk(t, func(tg *iscsitest.Target, c *pdu.SCSICommand, data []byte) []iscsitest.Reply {
		var out []iscsitest.Reply
		if c.Read {
			out = append(out, dataInNoStatus(c, want))
		}
		if c.Write {
			written = append([]byte(nil), data...)
		}
		return append(out, statusReply(tg, c, scsi.StatusCheckCondition, recovered.Marshal())...)
	})
	for _, op := range lunOps {
		if err := op.run(ctx5(t), l); err != nil {
			t.Errorf("%s with RECOVERED ERROR: %v", op.name, err)
		}
	}
	if !bytes.Equal(written, bytes.Repeat([]byte{0xa5}, 4096)) {
		t.Error("target did not get the write")
	}
	got := make([]byte, len(want))
	if err := l.ReadAt(ctx5(t), got, 0); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read with RECOVERED ERROR: %v, data equal %v", err, bytes.Equal(got, want))
	}
}

// RECOVERED ERROR does not excuse missing data: a read whose Data-In
// covers half the buffer fails even though the target claims no residual,
// and a deferred RECOVERED ERROR (this command was not run) is an error.
func TestLUNRecoveredErrorStillChecksData(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sense scsi.Sense
		data  int
	}{
		{"half the data", scsi.Sense{ResponseCode: scsi.SenseFixedCurrent, Key: scsi.KeyRecoveredError}, 2048},
		{"no data", scsi.Sense{ResponseCode: scsi.SenseDescriptorCurrent, Key: scsi.KeyRecoveredError}, 0},
		{"deferred", scsi.Sense{ResponseCode: scsi.SenseFixedDeferred, Key: scsi.KeyRecoveredError}, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, l := openFakeDisk(t, func(tg *iscsitest.Target, c *pdu.SCSICommand, _ []byte) []iscsitest.Reply {
				var out []iscsitest.Reply
				if tc.data > 0 {
					out = append(out, dataInNoStatus(c, bytes.Repeat([]byte{1}, tc.data)))
				}
				return append(out, statusReply(tg, c, scsi.StatusCheckCondition, tc.sense.Marshal())...)
			})
			err := l.ReadAt(ctx5(t), make([]byte, 4096), 0)
			if err == nil {
				t.Fatal("read accepted")
			}
			if e := errnoOf(err); e != syscall.EIO {
				t.Errorf("errno %v (%v), want EIO", e, err)
			}
			if s.Err() != nil {
				t.Errorf("session failed: %v", s.Err())
			}
		})
	}
}

// A CHECK CONDITION is an error unless readable sense data says RECOVERED
// ERROR: without sense, with an empty or unreadable sense, or with sense
// that ends before its key, every operation fails with EIO.
func TestLUNCheckConditionWithoutUsableSense(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segment []byte // the SCSI Response data segment
	}{
		{"no data segment", nil},
		{"sense length 0", []byte{0, 0}},
		{"unknown response code", senseSegment([]byte{0x7f, 0, 0x01, 0, 0, 0, 0, 10})},
		{"fixed sense ending before the key", senseSegment([]byte{0x70, 0})},
		{"descriptor sense ending before the key", senseSegment([]byte{0x72})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, l := openFakeDisk(t, func(tg *iscsitest.Target, c *pdu.SCSICommand, _ []byte) []iscsitest.Reply {
				var out []iscsitest.Reply
				if c.Read {
					out = append(out, dataInNoStatus(c, make([]byte, c.ExpectedDataTransferLength)))
				}
				r := pdu.SCSIResponse{ITT: c.ITT, Status: uint8(scsi.StatusCheckCondition), TargetSNs: tg.SNs(true)}
				return append(out, iscsitest.Reply{PDU: pdu.NewPDU(&r, tc.segment)})
			})
			for _, op := range lunOps {
				err := op.run(ctx5(t), l)
				if err == nil {
					t.Errorf("%s: CHECK CONDITION accepted", op.name)
				} else if e := errnoOf(err); e != syscall.EIO {
					t.Errorf("%s: errno %v (%v), want EIO", op.name, e, err)
				}
			}
		})
	}
}
