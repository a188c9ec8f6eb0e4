package initiator_test

import (
	"sync"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// refiller is a CommandDone that submits a new command each time one
// ends, until n have ended: the client keeps more commands than the
// session has entries, so the backlog never drains.
type refiller struct {
	s       *initiator.Session
	mu      sync.Mutex
	ended   int
	n       int
	errs    []error
	maxCap  int
	done    chan struct{}
	refills int
}

func (f *refiller) CommandDone(tag initiator.Tag, r *initiator.Result, err error) {
	f.mu.Lock()
	f.ended++
	if err != nil {
		f.errs = append(f.errs, err)
	}
	more := f.refills < f.n
	if more {
		f.refills++
	}
	last := f.ended == f.n+initialBacklogClients
	f.mu.Unlock()
	// The capacity is read after the lock: BacklogCap takes the session's.
	if c := initiator.BacklogCap(f.s); c > f.maxCap {
		f.mu.Lock()
		f.maxCap = c
		f.mu.Unlock()
	}
	if more {
		if err := f.s.Submit(write10(make([]byte, 512)), f, tag); err != nil {
			f.mu.Lock()
			f.errs = append(f.errs, err)
			f.mu.Unlock()
		}
	}
	if last {
		close(f.done)
	}
}

const initialBacklogClients = 4

// TestBacklogStaysBoundedWhileNeverDrained: a session with one command
// entry and a client that keeps four commands submitted (each end submits
// the next) has a backlog that never empties. Its storage must follow the
// commands waiting, not every command that ever waited: a backlog reset
// only when it drains grows by one entry per command for as long as the
// load lasts.
func TestBacklogStaysBoundedWhileNeverDrained(t *testing.T) {
	s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		return tg.Good(req)
	}), func(c *initiator.SessionConfig) { c.QueueDepth, c.NOPInterval = 1, -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 2000
	f := &refiller{s: s, n: n, done: make(chan struct{})}
	for i := range initialBacklogClients {
		if err := s.Submit(write10(make([]byte, 512)), f, initiator.Tag(i)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.done:
	case <-ctx5(t).Done():
		t.Fatalf("only %d of %d commands ended", f.ended, n+initialBacklogClients)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) > 0 {
		t.Fatalf("errors: %v", f.errs[0])
	}
	if f.maxCap > 4*initialBacklogClients {
		t.Fatalf("backlog capacity reached %d for at most %d waiting commands", f.maxCap, initialBacklogClients)
	}
}
