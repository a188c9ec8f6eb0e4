package initiator_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
)

// chainIO starts its next command from the CommandDone of the last one,
// on the datamover's completion goroutine, as a frontend's loop does.
type chainIO struct {
	s     *initiator.Session
	left  atomic.Int32
	ended atomic.Int32
	errs  chan error
	buf   []byte
}

func (c *chainIO) start() {
	cmd := initiator.Command{CDB: rw16(0x88, 0, 8), Read: c.buf}
	if err := c.s.Submit(&cmd, c, 0); err != nil {
		c.errs <- err
	}
}

// wait waits up to d for total commands to have ended, failing on the
// first error, and returns how many did.
func (c *chainIO) wait(t *testing.T, total int32, d time.Duration) int32 {
	t.Helper()
	deadline := time.Now().Add(d)
	for c.ended.Load() < total && time.Now().Before(deadline) {
		select {
		case err := <-c.errs:
			t.Fatal(err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return c.ended.Load()
}

func (c *chainIO) CommandDone(_ initiator.Tag, _ *initiator.Result, err error) {
	if err != nil {
		c.errs <- err
		return
	}
	c.ended.Add(1)
	if c.left.Add(-1) >= 0 {
		c.start()
	}
}

// While the HCA holds back the completions of our SENDs (their
// acknowledgements lag behind the target's answers), commands started
// from completion callbacks run out of send queue entries. They must wait
// for them without blocking the goroutine that reaps completions: every
// SEND posted is still one entry, never more than the send queue holds,
// and once the completions come the rest go out, in order. (Most SENDs are
// unsignaled; the fake retires their entries only with a later signaled
// completion, as a device does.)
func TestISERSendsWaitForSendQueueWithoutBlockingCompletions(t *testing.T) {
	const depth = 4
	s, _, fc := iserSessionDepth(t, 4096, depth)
	fc.HoldSendCompletions()
	c := &chainIO{s: s, errs: make(chan error, 8), buf: make([]byte, 4096)}
	const total = 60
	c.left.Store(total - depth)
	for i := 0; i < depth; i++ {
		go c.start()
	}
	// The send queue has depth+16 entries (16 for control PDUs).
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := fc.SendQueueUse(); n < depth+16 && time.Now().Before(deadline); n, _ = fc.SendQueueUse() {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n, most := fc.SendQueueUse(); n != depth+16 || most != depth+16 {
		t.Fatalf("%d SENDs in the send queue (at most %d), want it full (%d)", n, most, depth+16)
	}
	if n := c.ended.Load(); n >= total {
		t.Fatalf("all %d commands ended with the send queue full", n)
	}
	fc.ReleaseSendCompletions()
	if n := c.wait(t, total, 10*time.Second); n != total {
		t.Fatalf("%d of %d commands ended after the send completions came", n, total)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
}

// Most SENDs go unsignaled (one completion per batch of them instead of
// one each), and the slots they free in order are enough: with depth
// commands in flight all the time, the send queue never holds more than
// its depth+16 entries.
func TestISERSignalsFewSends(t *testing.T) {
	const depth = 8
	s, _, fc := iserSessionDepth(t, 4096, depth)
	c := &chainIO{s: s, errs: make(chan error, 8), buf: make([]byte, 4096)}
	const total = 2000
	c.left.Store(total - depth)
	for i := 0; i < depth; i++ {
		go c.start()
	}
	if n := c.wait(t, total, 20*time.Second); n != total {
		t.Fatalf("%d of %d commands ended", n, total)
	}
	posted, signaled := fc.Sends()
	if posted < total || signaled*8 > posted {
		t.Errorf("%d of %d SENDs signaled; want about one in 16", signaled, posted)
	}
	if _, most := fc.SendQueueUse(); most > depth+16 {
		t.Errorf("the send queue held %d entries; it has %d", most, depth+16)
	}
}
