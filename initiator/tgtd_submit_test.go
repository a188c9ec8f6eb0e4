package initiator_test

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestTgtdSubmit runs many commands through Submit against a real tgtd,
// far more than the session's 8 command entries, so that most wait for an
// entry and start from the callbacks' goroutine: 256 writes of 4 KiB at
// once, then 256 reads of them, each completed once and the data checked.
func TestTgtdSubmit(t *testing.T) {
	const n, size = 256, 4096
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:submit", LUNs: []tgttest.LUN{{Size: 8 << 20}}})
	s, err := tgtLogin(t, srv, "iqn.2026-11.test:submit", func(c *initiator.SessionConfig) { c.QueueDepth = 8 })
	if err != nil {
		t.Fatal(err)
	}
	openLUN(t, s, 1) // takes the power-on UNIT ATTENTION
	lun := [8]byte{0, 1}
	data := make([]byte, n*size)
	rand.Read(data)
	run := func(read bool, buf []byte) {
		t.Helper()
		c := &counter{calls: map[initiator.Tag]int{}}
		c.wg.Add(n)
		for i := range n {
			cmd := &initiator.Command{LUN: lun, CDB: rw16(0x8a, uint64(i*size/512), size/512)}
			if read {
				cmd.CDB[0] = 0x88
				cmd.Read = buf[i*size : (i+1)*size]
			} else {
				cmd.Write = buf[i*size : (i+1)*size]
			}
			if err := s.Submit(cmd, c, initiator.Tag(i)); err != nil {
				t.Fatal(err)
			}
		}
		c.wg.Wait()
		if len(c.errs) > 0 {
			t.Fatalf("read %v: %d errors, first %v", read, len(c.errs), c.errs[0])
		}
		for i := range n {
			if c.calls[initiator.Tag(i)] != 1 {
				t.Fatalf("tag %d completed %d times", i, c.calls[initiator.Tag(i)])
			}
		}
	}
	run(false, data)
	back := make([]byte, len(data))
	run(true, back)
	if !bytes.Equal(back, data) {
		t.Fatal("data read back differs from what was written")
	}
}
