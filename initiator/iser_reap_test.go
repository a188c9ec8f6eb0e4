package initiator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/rdma"
)

// reapDone records where IODone ran: inside Reap (the loop's) or not.
type reapDone struct {
	inReap  atomic.Bool
	reaped  atomic.Int32 // IODone calls inside Reap
	outside atomic.Int32 // IODone calls on another goroutine
	errs    chan error
}

func (d *reapDone) IODone(tag uint32, err error) {
	if d.inReap.Load() {
		d.reaped.Add(1)
	} else {
		d.outside.Add(1)
	}
	d.errs <- err
}

// reap waits for rp's descriptor and reaps, as a frontend loop does.
func (d *reapDone) reap(t *testing.T, rp blockdev.Reaper) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(rp.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 5000); err != nil || n != 1 {
		t.Fatalf("the reaper's descriptor did not become readable: %d, %v", n, err)
	}
	d.inReap.Store(true)
	defer d.inReap.Store(false)
	return rp.Reap()
}

func (d *reapDone) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-d.errs:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no IODone")
	}
}

// TestISERReaperHandover: a frontend loop takes a LUN's completion queue
// over (blockdev.Reaping). While it holds it the datamover's poller is
// parked: a read ends only when the loop reaps, inside Reap. Only one loop
// holds it at a time. Released, the poller completes again. When the
// connection goes, the loop's Reap finds out (its descriptor turns
// readable with the flushed receives), reports the end and revokes it,
// and the next session's queue can be taken. Closing with a reaper held does
// not hang, and a Reap after it does nothing.
func TestISERReaperHandover(t *testing.T) {
	nx, fake := dialFakeISERNexus(t, "reap", 8, 1<<12)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := initiator.OpenLUN(ctx, nx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var _ blockdev.Reaping = l
	revoked := make(chan struct{}, 4)
	revoke := func() { revoked <- struct{}{} }
	d := &reapDone{errs: make(chan error, 4)}
	buf := make([]byte, 4096)

	rp, ok := l.Reaper(revoke)
	if !ok {
		t.Fatal("a LUN over iSER did not hand its completion queue over")
	}
	if _, ok := l.Reaper(revoke); ok {
		t.Fatal("a second loop got the completion queue too")
	}
	l.StartRead(buf, 0, d, 1)
	time.Sleep(50 * time.Millisecond)
	if d.outside.Load() != 0 {
		t.Fatal("the read ended without the loop reaping: the poller still polls")
	}
	for d.reaped.Load() == 0 {
		if !d.reap(t, rp) {
			t.Fatal("Reap reported the end of a live connection")
		}
	}
	d.wait(t)

	rp.Release()
	rp.Release() // idempotent
	l.StartRead(buf, 4096, d, 2)
	d.wait(t)
	if d.outside.Load() != 1 {
		t.Fatalf("after Release the read ended inside Reap (%d) or not at all", d.reaped.Load())
	}

	rp, ok = l.Reaper(revoke)
	if !ok {
		t.Fatal("the completion queue could not be taken again after Release")
	}
	first := fake.conn(0)
	first.Disconnect() // the flushed receives make the descriptor readable
	for d.reap(t, rp) {
	}
	select {
	case <-revoked:
	default:
		t.Fatal("the loop was not told that its connection went")
	}
	rp.Release()
	deadline := time.Now().Add(5 * time.Second)
	for nx.Status().Recoveries == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var rp2 blockdev.Reaper
	for rp2 == nil && time.Now().Before(deadline) {
		if rp2, ok = l.Reaper(revoke); !ok {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if rp2 == nil || fake.conn(-1) == first {
		t.Fatal("the next session's completion queue could not be taken")
	}
	before := d.reaped.Load()
	l.StartRead(buf, 8192, d, 3)
	for d.reaped.Load() == before {
		if !d.reap(t, rp2) {
			t.Fatal("Reap reported the end of the next session's connection")
		}
	}
	d.wait(t)

	// The loop keeps reaping while the Nexus closes (the logout's
	// response comes through it) until Reap reports the end.
	loopOut := make(chan struct{})
	go func() {
		defer close(loopOut)
		fds := []unix.PollFd{{Fd: int32(rp2.Fd()), Events: unix.POLLIN}}
		for {
			_, _ = unix.Poll(fds, 20)
			if !rp2.Reap() {
				rp2.Release()
				return
			}
		}
	}()
	closed := make(chan struct{})
	go func() {
		nx.Close()
		close(closed)
	}()
	for _, c := range []chan struct{}{closed, loopOut} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatal("Close, or the loop's end, hung while a loop held the completion queue")
		}
	}
	if rp2.Reap() {
		t.Fatal("Reap after Close reported a live connection")
	}
}

// reapedDatamover is an iSER datamover on conn in full feature phase (a
// handler that drops what it gets), its completion queue taken over.
func reapedDatamover(t *testing.T, conn initiator.RDMAConn) (*initiator.ISERDatamover, blockdev.Reaper) {
	t.Helper()
	d, err := initiator.NewISERDatamover(conn, 8)
	if err != nil {
		t.Fatal(err)
	}
	d.ReceiveInline(func(*pdu.PDU) error { return nil })
	rp, ok := d.TakeReaper(func() {})
	if !ok {
		t.Fatal("TakeReaper refused")
	}
	return d, rp
}

// gatedConn is isertest's Conn whose TryPoll can be held at its start,
// and which records a PollFd asked after Close (rdma.Conn's descriptor
// number is free for reuse by then).
type gatedConn struct {
	*isertest.Conn
	inTry     chan struct{}
	gate      chan struct{}
	closed    atomic.Bool
	lateFdUse atomic.Bool
}

func (c *gatedConn) TryPoll(out []rdma.Completion) (int, error) {
	select {
	case c.inTry <- struct{}{}:
		<-c.gate
	default:
	}
	return c.Conn.TryPoll(out)
}

func (c *gatedConn) PollFd() int {
	if c.closed.Load() {
		c.lateFdUse.Store(true)
	}
	return c.Conn.PollFd()
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Store(true)
	return err
}

// TestISERReaperFdOutlivesClose: a Reap that began before Close reports
// the connection live; Close then finishes (it waits out the Reap, not the
// Release), and the loop re-arms its poll on Fd, as queue.run does after
// a live Reap. Fd must still be the loop's own open descriptor, not the
// closed connection's number.
func TestISERReaperFdOutlivesClose(t *testing.T) {
	fc := &gatedConn{Conn: isertest.NewConn(64), inTry: make(chan struct{}, 1), gate: make(chan struct{})}
	d, rp := reapedDatamover(t, fc)
	live := make(chan bool)
	go func() { live <- rp.Reap() }()
	<-fc.inTry // Reap found the connection live and polls
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	time.Sleep(50 * time.Millisecond) // Close: closing, waiting for the Reap
	close(fc.gate)
	if !<-live {
		t.Skip("Reap saw the close: no re-arm to check")
	}
	<-closed
	fd := rp.Fd()
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the reaper's descriptor %d is closed after the connection closed: %v", fd, err)
	}
	rp.Release()
	if fc.lateFdUse.Load() {
		t.Fatal("the connection's descriptor was asked for after Close")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
		t.Fatal("Release left the reaper's descriptor open")
	}
}

// slowCloseConn's Close first makes PollFd readable, as rdma.Conn.Close's
// wake does, then takes long, as its drain may (up to seconds).
type slowCloseConn struct{ *isertest.Conn }

func (c slowCloseConn) Close() error {
	c.Conn.Disconnect()
	time.Sleep(500 * time.Millisecond)
	return c.Conn.Close()
}

// TestISERReapDoesNotWaitForCloseDrain: a loop whose poll fires while
// Close drains the connection learns at once that it is closing; its Reap
// does not sit out the drain on the ublk thread.
func TestISERReapDoesNotWaitForCloseDrain(t *testing.T) {
	d, rp := reapedDatamover(t, slowCloseConn{isertest.NewConn(64)})
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	time.Sleep(50 * time.Millisecond) // Close is draining
	if rp.Reap() {
		t.Fatal("Reap of a closing connection reported it live")
	}
	select {
	case <-closed:
		t.Fatal("Reap returned only after Close's drain")
	default:
	}
	rp.Release()
	<-closed
}

// reapingLUN opens LUN 0 of a fake iSER nexus of depth and takes its
// completion queue over, as a frontend loop does; released at cleanup.
func reapingLUN(t *testing.T, volume string, depth int) (*initiator.LUN, blockdev.Reaper, *fakeISERConns) {
	t.Helper()
	nx, fake := dialFakeISERNexus(t, volume, depth, 1<<12)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := initiator.OpenLUN(ctx, nx, 0)
	if err != nil {
		t.Fatal(err)
	}
	rp, ok := l.Reaper(func() {})
	if !ok {
		t.Fatal("a LUN over iSER did not hand its completion queue over")
	}
	t.Cleanup(rp.Release)
	return l, rp, fake
}
