package initiator_test

import (
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
)

// outcome is a CommandDone that hands the result over a channel.
type outcome struct {
	status uint8
	err    error
}

type outcomes chan outcome

// next waits up to 5 s for the next CommandDone.
func (o outcomes) next(t *testing.T) outcome {
	t.Helper()
	select {
	case x := <-o:
		return x
	case <-time.After(5 * time.Second):
		t.Fatal("no CommandDone")
		return outcome{}
	}
}

func (o outcomes) CommandDone(tag initiator.Tag, r *initiator.Result, err error) {
	var x outcome
	x.err = err
	if r != nil {
		x.status = r.Status
	}
	o <- x
}

// TestNexusSubmitReissuesOnReinstatedSession: the first connection drops
// when the command arrives; the command submitted with Nexus.Submit is
// issued again on the reinstated session through its callback, and its
// CommandDone reports success once.
func TestNexusSubmitReissuesOnReinstatedSession(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	f := &fakePortals{t: t, down: map[string]bool{}, handler: dropFirstCommand(&seen, &mu)}
	nx := dialNexus(t, f, nil)
	data := make([]byte, 1024)
	for i := range data {
		data[i] = byte(i)
	}
	o := make(outcomes, 2)
	if err := nx.Submit(write10(data), o, 7); err != nil {
		t.Fatal(err)
	}
	select {
	case x := <-o:
		if x.err != nil || x.status != 0 {
			t.Fatalf("write across a dropped connection: %v status %d", x.err, x.status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no CommandDone")
	}
	select {
	case x := <-o:
		t.Fatalf("a second CommandDone: %+v", x)
	case <-time.After(50 * time.Millisecond):
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || string(seen[0]) != string(data) || string(seen[1]) != string(data) {
		t.Fatalf("target saw %d writes; want the same write on both connections", len(seen))
	}
	if st := nx.Status(); st.State != initiator.NexusUp || st.Recoveries != 1 || st.Faults != 1 {
		t.Fatalf("status %+v, want up after 1 fault and 1 recovery", st)
	}
}

// TestNexusSubmitReplacementTimeoutIsEIO: with the only portal down, a
// submitted command whose connection dropped ends with the replacement
// timeout as EIO.
func TestNexusSubmitReplacementTimeoutIsEIO(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	f := &fakePortals{t: t, down: map[string]bool{}, handler: dropFirstCommand(&seen, &mu)}
	nx := dialNexus(t, f, func(c *initiator.NexusConfig) {
		c.Portals = c.Portals[:1]
		c.ReplacementTimeout = 200 * time.Millisecond
	})
	f.setDown("p1:3260", true)
	o := make(outcomes, 1)
	if err := nx.Submit(write10(make([]byte, 512)), o, 0); err != nil {
		t.Fatal(err)
	}
	x := o.next(t)
	var en interface{ Errno() syscall.Errno }
	if !errors.Is(x.err, initiator.ErrReplacementTimeout) || !errors.As(x.err, &en) || en.Errno() != syscall.EIO {
		t.Fatalf("write with the target gone: %v, want the replacement timeout as EIO", x.err)
	}
}
