package initiator_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// The LUN's asynchronous path against tgtd: 32 requests in flight at once,
// some of them larger than one command (they go in 512 KiB chunks), write
// then read back, each reported once to its own tag.
func TestTgtdAsyncReadWrite(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 64 << 20}}})
	s, err := tgtLogin(t, srv, srv.IQN(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := openLUN(t, s, 1)
	const n = 32
	size := func(i int) int {
		if i%8 == 0 {
			return 1<<20 + 4096 // three commands
		}
		return 4096 * (1 + i%4)
	}
	data := make([][]byte, n)
	for i := range data {
		data[i] = make([]byte, size(i))
		rand.Read(data[i])
	}
	off := func(i int) int64 { return int64(i) * (2 << 20) }
	run := func(start func(i int, d blockdev.Done)) {
		t.Helper()
		w := make(tagWaiter, n)
		for i := 0; i < n; i++ {
			start(i, w)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		seen := make(map[uint32]bool)
		for len(seen) < n {
			select {
			case r := <-w:
				if r.err != nil {
					t.Fatalf("tag %d: %v", r.tag, r.err)
				}
				if seen[r.tag] {
					t.Fatalf("tag %d reported twice", r.tag)
				}
				seen[r.tag] = true
			case <-ctx.Done():
				t.Fatalf("%d of %d requests reported", len(seen), n)
			}
		}
	}
	run(func(i int, d blockdev.Done) { l.StartWrite(data[i], off(i), i%3 == 0, d, uint32(i)) })
	back := make([][]byte, n)
	run(func(i int, d blockdev.Done) {
		back[i] = make([]byte, size(i))
		l.StartRead(back[i], off(i), d, uint32(i))
	})
	for i := range data {
		if !bytes.Equal(back[i], data[i]) {
			t.Fatalf("request %d (%d bytes at %d) read back differently", i, size(i), off(i))
		}
	}
	// A request outside the LUN fails at once, and is reported.
	w := make(tagWaiter, 1)
	l.StartRead(make([]byte, 4096), 64<<20, w, 9)
	if r := <-w; r.err == nil || r.tag != 9 {
		t.Fatalf("read past the end: tag %d, %v", r.tag, r.err)
	}
}

type tagResult struct {
	tag uint32
	err error
}

// tagWaiter collects IODone calls.
type tagWaiter chan tagResult

func (w tagWaiter) IODone(tag uint32, err error) { w <- tagResult{tag, err} }
