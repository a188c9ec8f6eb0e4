package tgttest

import (
	"os"
	"strings"
	"testing"
)

// The log was captured from tgtd 1.0.85 -d 1 while qemu-io (libiscsi) wrote
// twice, then discarded, wrote zeroes with unmap and read, on LUN 1.
func TestTracerCapturedLog(t *testing.T) {
	data, err := os.ReadFile("testdata/tgtd-1.0.85-debug.log")
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracer()
	marker := tr.expect(12345)
	tr.run(strings.NewReader(string(data)), nil)
	select {
	case <-marker:
	default:
		t.Error("marker 12345 (mtask_execute tid) not seen")
	}
	want := map[byte]CommandCount{
		OpWrite10:            {Queued: 2, Done: 2},
		OpSynchronizeCache10: {Queued: 2, Done: 2},
		OpUnmap:              {Queued: 1, Done: 1},
		OpWriteSame10:        {Queued: 1, Done: 1},
		OpRead10:             {Queued: 1, Done: 1},
		OpInquiry:            {Queued: 14},
		OpWriteSame16:        {},
	}
	for op, w := range want {
		if got := tr.get(1, op); got != w {
			t.Errorf("LUN 1 opcode %#02x: got %+v, want %+v", op, got, w)
		}
	}
	if got := tr.get(0, OpWrite10); got != (CommandCount{}) {
		t.Errorf("LUN 0 WRITE(10): got %+v, want none", got)
	}
	cmds := tr.commands()
	if len(cmds) != 29 || cmds[0] != (Command{LUN: 1, Opcode: OpTestUnitReady}) {
		t.Errorf("command log: %d entries starting %+v, want 29 starting TEST UNIT READY", len(cmds), cmds[:1])
	}
}

func TestTracerInterleavedAndErrors(t *testing.T) {
	tr := newTracer()
	for _, l := range []string{
		"tgtd: tgtd: target_cmd_queue(1126) 0x55aa 93 a",
		"bs_rdwr_request(346) io done 0x55aa 93 0 0",
		"tgtd: target_cmd_queue(1126) 0x55aa 2a a",
		"tgtd: bs_rdwr_request(361) io error 0x55aa 2a -5 4096 0, Input/output error",
		"tgtd: bs_rdwr_request(346) io done 0x9999 2a 0 0", // unknown command: ignored
		"tgtd: target_cmd_queue(1126) 0x55ab 42 1tgtd: target_cmd_queue(1126) 0x55ac 42 1",
	} {
		tr.line(l)
	}
	if got, want := tr.get(10, OpWriteSame16), (CommandCount{Queued: 1, Done: 1}); got != want {
		t.Errorf("WRITE SAME(16) on LUN 10: got %+v, want %+v", got, want)
	}
	if got, want := tr.get(10, OpWrite10), (CommandCount{Queued: 1, IOErrors: 1}); got != want {
		t.Errorf("WRITE(10) on LUN 10: got %+v, want %+v", got, want)
	}
	if got, want := tr.get(1, OpUnmap), (CommandCount{Queued: 2}); got != want {
		t.Errorf("UNMAP on LUN 1: got %+v, want %+v", got, want)
	}
}

func TestTracerTail(t *testing.T) {
	tr := newTracer()
	for i := 0; i < tailLines+5; i++ {
		tr.line(strings.Repeat("x", i))
	}
	tail := tr.lastLines()
	if len(tail) != tailLines || len(tail[0]) != 5 || len(tail[tailLines-1]) != tailLines+4 {
		t.Errorf("tail: %d lines, first %d long, last %d long", len(tail), len(tail[0]), len(tail[len(tail)-1]))
	}
}
