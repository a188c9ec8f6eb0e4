package initiator_test

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/initiator"
)

// reapingMultipath is a Multipath of two iSER paths on isertest
// connections that log in again quickly, and a LUN on it.
func reapingMultipath(t *testing.T) (*initiator.Multipath, *initiator.LUN, []*fakeISERConns) {
	t.Helper()
	cfg := initiator.MultipathConfig{NoPathTimeout: 5 * time.Second}
	fakes := []*fakeISERConns{{}, {}}
	for i, f := range fakes {
		nc := fakeISERNexusConfig(fmt.Sprint("mpreap", i), 8)
		nc.Portals = []string{fmt.Sprintf("fake-iser-%d:3260", i)}
		initiator.SetNexusConnect(&nc, f.connect(1<<12, 8))
		cfg.Paths = append(cfg.Paths, nc)
	}
	m, err := initiator.DialMultipath(ctx5(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	l, err := initiator.OpenLUN(ctx5(t), m, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, l, fakes
}

// TestMultipathReaperHandover: a frontend loop takes the completion
// queues of both paths of a Multipath at once, through one descriptor:
// while it holds them the reads on either path end inside Reap, and no
// second loop gets them. Released, the paths' pollers complete again.
// When one path's connection goes, Reap reports the end and the loop is
// told; the next set has the path that is left, and when the lost path
// logs in again the loop is told once more, and the set after has both.
// Closing with a set held does not hang.
func TestMultipathReaperHandover(t *testing.T) {
	m, l, fakes := reapingMultipath(t)
	var _ blockdev.Reaping = m
	revoked := make(chan struct{}, 8)
	revoke := func() { revoked <- struct{}{} }
	d := &reapDone{errs: make(chan error, 8)}
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	// readAll starts one read per buffer (round-robin: both paths) and
	// reaps rp until they all ended inside Reap.
	readAll := func(rp blockdev.Reaper) {
		t.Helper()
		before, outside := d.reaped.Load(), d.outside.Load()
		for i, b := range bufs {
			l.StartRead(b, int64(i)*4096, d, uint32(i))
		}
		time.Sleep(50 * time.Millisecond)
		if n := d.outside.Load() - outside; n != 0 {
			t.Fatalf("%d reads ended without the loop reaping", n)
		}
		for d.reaped.Load()-before < int32(len(bufs)) {
			if !d.reap(t, rp) {
				t.Fatal("Reap reported the end of live paths")
			}
		}
		for range bufs {
			d.wait(t)
		}
	}

	rp, ok := l.Reaper(revoke)
	if !ok {
		t.Fatal("a LUN over a two-path Multipath did not hand its completion queues over")
	}
	if _, ok := l.Reaper(revoke); ok {
		t.Fatal("a second loop got the completion queues too")
	}
	readAll(rp)
	for i, p := range m.Paths() {
		if p.IOs < 2 {
			t.Errorf("path %d carried %d reads: both paths must be reaped", i, p.IOs)
		}
	}
	rp.Release()
	rp.Release() // idempotent
	l.StartRead(bufs[0], 0, d, 9)
	d.wait(t)
	if d.outside.Load() != 1 {
		t.Fatal("after Release a read did not end through the paths' pollers")
	}

	// One path's connection goes.
	rp, ok = l.Reaper(revoke)
	if !ok {
		t.Fatal("the completion queues could not be taken again after Release")
	}
	first := fakes[0].conn(0)
	first.Disconnect()
	for d.reap(t, rp) {
	}
	select {
	case <-revoked:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop was not told that a path's connection went")
	}
	rp.Release()
	for len(revoked) > 0 {
		<-revoked
	}
	// The next set: taken as soon as one path can hand its queue over.
	deadline := time.Now().Add(5 * time.Second)
	var rp2 blockdev.Reaper
	for rp2 == nil && time.Now().Before(deadline) {
		if rp2, ok = l.Reaper(revoke); !ok {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if rp2 == nil {
		t.Fatal("no set could be taken after a path's connection went")
	}
	// The lost path logs in again (its Nexus reconnects): the loop is
	// told, and the set after that has both paths' queues.
	for fakes[0].conn(-1) == first && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-revoked:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop was not told that a path logged in again")
	}
	if rp2.Reap() {
		t.Fatal("Reap of a revoked set reported it live")
	}
	rp2.Release()
	var rp3 blockdev.Reaper
	for rp3 == nil && time.Now().Before(deadline) {
		if rp3, ok = l.Reaper(revoke); !ok {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if rp3 == nil {
		t.Fatal("no set could be taken after the path came back")
	}
	// Both paths usable again (checked) before the reads.
	for time.Now().Before(deadline) {
		up := 0
		for _, p := range m.Paths() {
			if p.State == initiator.PathUp {
				up++
			}
		}
		if up == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	readAll(rp3)

	// The loop keeps reaping while the paths log out (their responses
	// come through it) until Reap reports the end.
	loopOut := make(chan struct{})
	go func() {
		defer close(loopOut)
		fds := []unix.PollFd{{Fd: int32(rp3.Fd()), Events: unix.POLLIN}}
		for {
			_, _ = unix.Poll(fds, 20)
			if !rp3.Reap() {
				rp3.Release()
				return
			}
		}
	}()
	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	for _, c := range []chan struct{}{closed, loopOut} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("Close, or the loop's end, hung while a loop held the completion queues")
		}
	}
	if rp3.Reap() {
		t.Fatal("Reap after Close reported live paths")
	}
}

// TestMultipathReaperSeesAChangeDuringItsBuild: a path that changes as a
// loop's set is being built (a path passed over logs in before the set is
// held where pathsChanged looks) ends that set at its first Reap, so that
// the loop's next set includes the path; a build that saw no change stays
// live.
func TestMultipathReaperSeesAChangeDuringItsBuild(t *testing.T) {
	m, l, _ := reapingMultipath(t)
	revoke := func() {}
	rp, ok := l.Reaper(revoke)
	if !ok {
		t.Fatal("no set over two live paths")
	}
	if !rp.Reap() {
		t.Fatal("a set built with no path change reported its end")
	}
	rp.Release()

	initiator.SetReaperScanHook(m, func() { initiator.PathsChanged(m) })
	rp, ok = l.Reaper(revoke)
	initiator.SetReaperScanHook(m, nil)
	if !ok {
		t.Fatal("no set over two live paths")
	}
	defer rp.Release()
	if rp.Reap() {
		t.Fatal("a set built across a path change reported itself live: the changed path could be missing from it")
	}
}

// TestMultipathSecondLoopAsksForNothing: while one loop holds the set,
// another loop's ask (it is woken for every completion of its own I/O)
// allocates nothing, and the held set is still the one a path change
// revokes.
func TestMultipathSecondLoopAsksForNothing(t *testing.T) {
	m, l, _ := reapingMultipath(t)
	rp, ok := l.Reaper(func() {})
	if !ok {
		t.Fatal("no set over two live paths")
	}
	defer rp.Release()
	if n := testing.AllocsPerRun(50, func() {
		if _, ok := l.Reaper(func() {}); ok {
			t.Fatal("a second loop got the completion queues too")
		}
	}); n != 0 {
		t.Errorf("a second loop's ask allocated %v times", n)
	}
	initiator.PathsChanged(m)
	if rp.Reap() {
		t.Fatal("after a second loop asked, a path change no longer revoked the held set")
	}
}

// TestMultipathPartialSetIsRebuilt: a path that refuses its queue as the
// set is built (here because something else holds it; after a login,
// because its datamover still has PDUs queued) is left out of the set,
// which then ends after PartialReaps Reaps so that the loop's next set
// has every path; a full set does not end so.
func TestMultipathPartialSetIsRebuilt(t *testing.T) {
	m, l, _ := reapingMultipath(t)
	held, ok := initiator.PathNexus(m, 1).Reaper(func() {})
	if !ok {
		t.Fatal("path 1's queue could not be taken")
	}
	rp, ok := l.Reaper(func() {})
	if !ok {
		t.Fatal("no set while path 0 could hand its queue over")
	}
	held.Release() // path 1 would accept now; nothing tells the set
	n := 0
	for rp.Reap() {
		if n++; n > 10*initiator.PartialReaps {
			t.Fatal("a set missing a path never ended")
		}
	}
	rp.Release()
	if n < initiator.PartialReaps/2 {
		t.Errorf("a set missing a path ended after %d Reaps, want about %d", n, initiator.PartialReaps)
	}
	rp, ok = l.Reaper(func() {})
	if !ok {
		t.Fatal("no set after the partial one")
	}
	defer rp.Release()
	for i := range 2 * initiator.PartialReaps {
		if !rp.Reap() {
			t.Fatalf("a set of both paths ended after %d Reaps", i)
		}
	}
}

// TestMultipathConcurrentAsksKeepOneSet: a second loop asking while the
// first one's set is being built (here, from inside the build) gets the
// queues first; the first build then gives up instead of taking the
// slot pathsChanged reads, so a path change still revokes the held set.
func TestMultipathConcurrentAsksKeepOneSet(t *testing.T) {
	m, l, _ := reapingMultipath(t)
	var inner blockdev.Reaper
	initiator.SetReaperScanHook(m, func() {
		initiator.SetReaperScanHook(m, nil)
		rp, ok := l.Reaper(func() {})
		if !ok {
			t.Error("the second ask got no set")
			return
		}
		inner = rp
	})
	if rp, ok := l.Reaper(func() {}); ok {
		rp.Release()
		t.Fatal("two loops got sets over the same paths")
	}
	if inner == nil {
		t.FailNow()
	}
	defer inner.Release()
	initiator.PathsChanged(m)
	if inner.Reap() {
		t.Fatal("after a concurrent ask a path change no longer revoked the held set")
	}
}
