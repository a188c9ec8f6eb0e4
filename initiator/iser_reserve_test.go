package initiator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
)

// TestISERBounceShortageFailsOneCommand: with the first chunk of bounce
// slots held by commands the target sits on, a command needing another
// chunk whose registration fails (RLIMIT_MEMLOCK) fails alone, with an
// error naming the shortage; the session stays up (no reconnect storm),
// and once the held commands are aborted other commands work. Before the
// fix the error came from SendCommand after the CmdSN was taken and
// dropped the session.
func TestISERBounceShortageFailsOneCommand(t *testing.T) {
	const held = 8 // one chunk of bounce slots
	s, _, fc := iserSession(t, 4096)
	fc.Target().Swallow(held)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, uint64(i), 1), Read: make([]byte, 512)})
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for fc.Target().Swallowing() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the held commands did not reach the target")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fc.FailRegistrations(0, 1)
	_, err := s.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, 1), Read: make([]byte, 512)})
	if !errors.Is(err, initiator.ErrNoBounceSlot) || !errors.Is(err, isertest.ErrRegister) {
		t.Errorf("command without a bounce slot: %v; want ErrNoBounceSlot wrapping the registration error", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session dropped by one command's bounce shortage: %v", err)
	}
	cancel() // ABORT TASK frees the held slots
	wg.Wait()
	if r, err := s.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, 0, 1), Read: make([]byte, 512)}); err != nil || r.Status != 0 {
		t.Fatalf("read after the shortage: %v %+v", err, r)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session: %v", err)
	}
}

// TestISERBounceChunkAtConnect: the first chunk of bounce slots is
// registered when the datamover is made, so a device that cannot pin it
// (RLIMIT_MEMLOCK) fails the connect with a clear error instead of
// failing the session's first commands. Before the fix the connect
// succeeded and the first bounced command dropped the session.
func TestISERBounceChunkAtConnect(t *testing.T) {
	fc := isertest.NewConn(64)
	fc.FailRegistrations(1, 1) // the control region registers; the bounce chunk does not
	dm, err := initiator.NewISERDatamover(fc, 16)
	if err == nil {
		dm.Close()
		t.Fatal("connect succeeded though the bounce pool could not be registered")
	}
	if !errors.Is(err, isertest.ErrRegister) {
		t.Errorf("connect: %v; want the registration error", err)
	}
}
