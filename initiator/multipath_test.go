package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// mpPort is one portal of a multipath test: its relative target port and
// target port group on a shared LU.
type mpPort struct {
	lu        *iscsitest.SharedLU
	rtp, tpg  uint16
	addr      string
	listening bool
}

// mpLab is a Multipath over the given ports and the LUN on it.
type mpLab struct {
	t *testing.T
	m *initiator.Multipath
	l *initiator.LUN
}

// dialMP listens on every port and opens LUN 0 through a Multipath.
func dialMP(t *testing.T, ports []*mpPort, mod func(*initiator.MultipathConfig)) *mpLab {
	t.Helper()
	cfg := initiator.MultipathConfig{NoPathTimeout: 3 * time.Second, RetryDown: 50 * time.Millisecond}
	for i, p := range ports {
		p.addr, _ = iscsitest.Listen(t, p.lu.Port(p.rtp, p.tpg))
		cfg.Paths = append(cfg.Paths, initiator.NexusConfig{
			Portals: []string{p.addr},
			Dial:    initiator.DialConfig{Transport: initiator.TransportTCP},
			Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
				InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:tgt",
				ISID: initiator.ISIDFromName(fmt.Sprint("vol", i))},
				NOPInterval: 100 * time.Millisecond, NOPTimeout: 200 * time.Millisecond, QueueDepth: 8},
			LoginTimeout: time.Second,
			MinBackoff:   10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		})
	}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := initiator.DialMultipath(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	l, err := initiator.OpenLUN(ctx, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &mpLab{t: t, m: m, l: l}
}

// ios returns each path's issued command count.
func (x *mpLab) ios() []uint64 {
	var out []uint64
	for _, p := range x.m.Paths() {
		out = append(out, p.IOs)
	}
	return out
}

// waitState waits until path i is in state st.
func (x *mpLab) waitState(i int, st initiator.PathState) {
	x.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for x.m.Paths()[i].State != st {
		if time.Now().After(deadline) {
			x.t.Fatalf("path %d is %v, want %v (%+v)", i, x.m.Paths()[i].State, st, x.m.Paths()[i])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func block(b byte) []byte { return bytes.Repeat([]byte{b}, 512) }

// rw writes n blocks from lba with pattern p and reads them back, half
// through the blocking path (Do) and half through the asynchronous one
// (Submit).
func (x *mpLab) rw(lba int64, n int, p byte) error {
	for i := range n {
		off := (lba + int64(i)) * 512
		want := block(p + byte(i))
		var err error
		if i%2 == 0 {
			err = x.l.WriteAt(context.Background(), want, off, false)
		} else {
			ch := make(chan error, 1)
			x.l.StartWrite(want, off, false, doneFunc(func(err error) { ch <- err }), 0)
			err = <-ch
		}
		if err != nil {
			return fmt.Errorf("write block %d: %w", lba+int64(i), err)
		}
		got := make([]byte, 512)
		if i%2 == 0 {
			ch := make(chan error, 1)
			x.l.StartRead(got, off, doneFunc(func(err error) { ch <- err }), 0)
			err = <-ch
		} else {
			err = x.l.ReadAt(context.Background(), got, off)
		}
		if err != nil {
			return fmt.Errorf("read block %d: %w", lba+int64(i), err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("block %d reads %x..., wrote %x...", lba+int64(i), got[:4], want[:4])
		}
	}
	return nil
}

// doneFunc is a blockdev.Done.
type doneFunc func(err error)

func (f doneFunc) IODone(_ uint32, err error) { f(err) }

func twoPorts(lu *iscsitest.SharedLU, g1, g2 uint16) []*mpPort {
	return []*mpPort{{lu: lu, rtp: 1, tpg: g1}, {lu: lu, rtp: 2, tpg: g2}}
}

func TestMultipathUsesEveryOptimizedPath(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	x := dialMP(t, twoPorts(lu, 1, 2), nil)
	before := x.ios()
	if err := x.rw(0, 16, 1); err != nil {
		t.Fatal(err)
	}
	after := x.ios()
	for i := range after {
		if after[i]-before[i] < 8 {
			t.Errorf("path %d carried %d of 32 commands: want round-robin over both optimized paths (%v -> %v)", i, after[i]-before[i], before, after)
		}
	}
	for i, p := range x.m.Paths() {
		if p.State != initiator.PathUp || p.ALUA != "active/optimized" || p.Group != i+1 {
			t.Errorf("path %d: %+v", i, p)
		}
	}
}

func TestMultipathFailoverAndFailback(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, false)
	x := dialMP(t, twoPorts(lu, 1, 1), nil)
	if err := x.rw(0, 4, 1); err != nil {
		t.Fatal(err)
	}
	lu.SetDown(1, true) // every connection to port 1 closes: the path is reset
	start := time.Now()
	if err := x.rw(10, 32, 2); err != nil {
		t.Fatalf("I/O during the failover: %v", err)
	}
	t.Logf("32 writes and reads across the failover in %v", time.Since(start))
	x.waitState(0, initiator.PathDown)
	if p := x.m.Paths()[0]; p.LastError == "" {
		t.Errorf("path 0 down without a last error: %+v", p)
	}
	if st := x.m.Status(); st.State != initiator.NexusUp {
		t.Errorf("multipath state %v with one path up", st.State)
	}
	// Failback: the path logs in again and takes I/O again.
	lu.SetDown(1, false)
	x.waitState(0, initiator.PathUp)
	before := x.ios()
	if err := x.rw(50, 8, 3); err != nil {
		t.Fatal(err)
	}
	if after := x.ios(); after[0] == before[0] {
		t.Errorf("path 0 took no I/O after failback (%v -> %v)", before, after)
	}
}

func TestMultipathStandbySenseMovesIO(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	x := dialMP(t, twoPorts(lu, 1, 2), nil)
	lu.SetState(1, scsi.AccessStandby, false) // no unit attention: the sense tells
	if err := x.rw(0, 8, 1); err != nil {
		t.Fatalf("I/O with path 0 in standby: %v", err)
	}
	x.waitState(0, initiator.PathStandby)
	before := x.ios()
	if err := x.rw(20, 8, 2); err != nil {
		t.Fatal(err)
	}
	if after := x.ios(); after[0] != before[0] {
		t.Errorf("a standby path took I/O (%v -> %v)", before, after)
	}
	// Back to active/optimized with a unit attention: it takes I/O again.
	lu.SetState(1, scsi.AccessActiveOptimized, true)
	if err := x.rw(40, 8, 3); err != nil {
		t.Fatal(err)
	}
	x.waitState(0, initiator.PathUp)
}

// TestMultipathTransitionFailedAttention: UNIT ATTENTION 2A/07 (an
// implicit transition failed) makes the states be read again, as 2A/06
// does. Path 0's group was left active/non-optimized, which no NOT READY
// reports and no probe of a serving path finds: only the re-read moves
// the I/O to the optimized path.
func TestMultipathTransitionFailedAttention(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	x := dialMP(t, twoPorts(lu, 1, 2), nil)
	if err := x.rw(0, 8, 1); err != nil {
		t.Fatal(err)
	}
	lu.SetStateAttention(1, scsi.AccessActiveNonOptimized, 0x07)
	deadline := time.Now().Add(3 * time.Second)
	for quiet := 0; quiet < 3; {
		before := x.ios()
		if err := x.rw(20, 8, 2); err != nil {
			t.Fatalf("I/O after 2A/07: %v", err)
		}
		if after := x.ios(); after[0] == before[0] {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 s after UNIT ATTENTION 2A/07 the non-optimized path still takes I/O (%v)", x.ios())
		}
	}
}

func TestMultipathNonOptimizedOnlyWithoutOptimized(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	lu.SetState(1, scsi.AccessActiveNonOptimized, false)
	x := dialMP(t, twoPorts(lu, 1, 2), nil)
	before := x.ios()
	if err := x.rw(0, 8, 1); err != nil {
		t.Fatal(err)
	}
	after := x.ios()
	if after[0] != before[0] || after[1] == before[1] {
		t.Fatalf("I/O went to the non-optimized path while an optimized one was usable (%v -> %v)", before, after)
	}
	lu.SetState(2, scsi.AccessUnavailable, true)
	if err := x.rw(20, 8, 2); err != nil {
		t.Fatalf("I/O with the optimized path unavailable: %v", err)
	}
	x.waitState(1, initiator.PathUnavailable)
	if now := x.ios(); now[0] == after[0] {
		t.Errorf("the non-optimized path took no I/O while the optimized one was unavailable (%v -> %v)", after, now)
	}
}

func TestMultipathTransitioningRetries(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	x := dialMP(t, []*mpPort{{lu: lu, rtp: 1, tpg: 1}}, nil)
	lu.SetState(1, scsi.AccessTransitioning, false)
	time.AfterFunc(300*time.Millisecond, func() { lu.SetState(1, scsi.AccessActiveOptimized, false) })
	start := time.Now()
	if err := x.rw(0, 2, 1); err != nil {
		t.Fatalf("I/O across a transition: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("I/O done in %v, before the transition ended", d)
	}
}

func TestMultipathRefusesPathToAnotherLU(t *testing.T) {
	lu, other := iscsitest.NewSharedLU(1024, 0x1234, false), iscsitest.NewSharedLU(1024, 0x5678, false)
	x := dialMP(t, []*mpPort{{lu: lu, rtp: 1, tpg: 1}, {lu: other, rtp: 1, tpg: 1}}, nil)
	p := x.m.Paths()[1]
	if p.State != initiator.PathRefused || !strings.Contains(p.LastError, "refused") || !strings.Contains(p.LastError, "naa.6") {
		t.Fatalf("path to another LU: %+v", p)
	}
	if err := x.rw(0, 8, 1); err != nil {
		t.Fatal(err)
	}
	if other.Writes() != 0 {
		t.Errorf("%d writes landed on the other LU", other.Writes())
	}
}

func TestMultipathNoPathTimeout(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, false)
	x := dialMP(t, twoPorts(lu, 1, 1), func(c *initiator.MultipathConfig) { c.NoPathTimeout = 700 * time.Millisecond })
	// Every path down for less than the no-path timeout: I/O waits and
	// completes.
	lu.SetDown(1, true)
	lu.SetDown(2, true)
	time.AfterFunc(300*time.Millisecond, func() { lu.SetDown(2, false) })
	if err := x.rw(0, 2, 1); err != nil {
		t.Fatalf("I/O across a short outage of every path: %v", err)
	}
	// For longer: EIO once the timeout has passed, not a hang.
	lu.SetDown(2, true)
	x.waitState(0, initiator.PathDown)
	x.waitState(1, initiator.PathDown)
	for _, async := range []bool{false, true} {
		start := time.Now()
		var err error
		if async {
			ch := make(chan error, 1)
			x.l.StartRead(make([]byte, 512), 0, doneFunc(func(err error) { ch <- err }), 0)
			select {
			case err = <-ch:
			case <-time.After(5 * time.Second):
				t.Fatal("asynchronous read hangs with no path")
			}
		} else {
			ch := make(chan error, 1)
			go func() { ch <- x.l.ReadAt(context.Background(), make([]byte, 512), 0) }()
			select {
			case err = <-ch:
			case <-time.After(5 * time.Second):
				t.Fatal("read hangs with no path")
			}
		}
		d := time.Since(start)
		var en interface{ Errno() syscall.Errno }
		if !errors.Is(err, initiator.ErrNoPath) || !errors.As(err, &en) || en.Errno() != syscall.EIO {
			t.Errorf("async %v: error %v, want EIO and ErrNoPath", async, err)
		}
		if d < 600*time.Millisecond || d > 3*time.Second {
			t.Errorf("async %v: failed after %v, want about the 700ms no-path timeout", async, d)
		}
	}
	if st := x.m.Status(); st.State != initiator.NexusFailed {
		t.Errorf("multipath state %v after the no-path timeout, want failed", st.State)
	}
}

// TestMultipathStaleWriteIsFenced: a write stalls on path 1 (silent: no
// answer, the session drops at its NOP timeout) and is issued again on path
// 2; a newer write to the same block follows. When path 1's target finally
// runs its old copy, it must not land: the LOGICAL UNIT RESET sent
// through path 2 before the reissue aborted it.
func TestMultipathStaleWriteIsFenced(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprint("async=", async), func(t *testing.T) { testStaleWrite(t, async) })
	}
}

func testStaleWrite(t *testing.T, async bool) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	lu.SetState(2, scsi.AccessActiveNonOptimized, false) // every write starts on path 1
	release := make(chan struct{})
	var once sync.Once
	lu.Stall = func(rtp uint16, cdb []byte) <-chan struct{} {
		var stall <-chan struct{}
		if rtp == 1 && (cdb[0] == 0x2a || cdb[0] == 0x8a) {
			once.Do(func() { stall = release })
		}
		return stall
	}
	x := dialMP(t, twoPorts(lu, 1, 2), nil)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	const lba = 7
	write := func(p []byte) error {
		if !async {
			return x.l.WriteAt(context.Background(), p, lba*512, false)
		}
		ch := make(chan error, 1)
		x.l.StartWrite(p, lba*512, false, doneFunc(func(err error) { ch <- err }), 0)
		return <-ch
	}
	if err := write(block(0xaa)); err != nil {
		t.Fatalf("stalled write: %v", err)
	}
	if err := write(block(0xbb)); err != nil {
		t.Fatalf("newer write: %v", err)
	}
	if got := lu.Block(lba); !bytes.Equal(got, block(0xbb)) {
		t.Fatalf("block %d holds %x... before the stale copy runs", lba, got[:2])
	}
	close(release) // path 1's target runs what it held
	time.Sleep(200 * time.Millisecond)
	if got := lu.Block(lba); !bytes.Equal(got, block(0xbb)) {
		t.Fatalf("the stale write landed after the newer one: block %d holds %x...", lba, got[:2])
	}
	if lu.Resets() == 0 {
		t.Error("no LOGICAL UNIT RESET was sent")
	}
}

// TestMultipathSubmitAllocatesNothing: the path choice (with either path
// selector) and the command record cost a command started with
// Multipath.Submit no allocation, as with a Session or a Nexus (the loop
// datamover allocates nothing). One command at a time, queue-length's
// ties take the paths in turn too.
func TestMultipathSubmitAllocatesNothing(t *testing.T) {
	for _, sel := range []initiator.PathSelector{initiator.SelectRoundRobin, initiator.SelectQueueLength} {
		t.Run(sel.String(), func(t *testing.T) { testSubmitAllocatesNothing(t, sel) })
	}
}

func testSubmitAllocatesNothing(t *testing.T, sel initiator.PathSelector) {
	cfg := initiator.MultipathConfig{NoPathTimeout: time.Second, Selector: sel}
	for i := range 2 {
		nc := initiator.NexusConfig{Portals: []string{fmt.Sprint("loop", i)},
			Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
				InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:loop"}, NOPInterval: -1, QueueDepth: 4}}
		initiator.SetNexusConnect(&nc, func(ctx context.Context, _ initiator.DialConfig, sc initiator.SessionConfig) (*initiator.Session, error) {
			return initiator.NewSession(ctx, newLoopDM(), sc)
		})
		cfg.Paths = append(cfg.Paths, nc)
	}
	m, err := initiator.DialMultipath(ctx5(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cmd := initiator.Command{CDB: rw16(0x88, 0, 8), Read: make([]byte, 4096)}
	g := &signal{ch: make(chan struct{}, 1)}
	submit := func() {
		if err := m.Submit(&cmd, g, 1); err != nil {
			t.Fatal(err)
		}
		<-g.ch
		if g.err != nil || g.status != 0 {
			t.Fatalf("read: %v status %d", g.err, g.status)
		}
	}
	for range 100 {
		submit()
	}
	if a := testing.AllocsPerRun(1000, submit); a != 0 {
		t.Errorf("Multipath.Submit (%v): %v allocations per command; want 0", sel, a)
	}
	for i, p := range m.Paths() {
		if p.IOs < 500 {
			t.Errorf("path %d carried %d of 1100 commands", i, p.IOs)
		}
	}
}

// TestMultipathSilentPathFailsOverWithin5s: with the CLI's path checking
// for multipath volumes (NOP-Out after 2 s of silence, 2 s to answer), a
// path that goes silent under I/O (its target stops answering, the
// connection stays) hands its reads and writes to the other path in at most
// 5 s, without an error.
func TestMultipathSilentPathFailsOverWithin5s(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 5 s")
	}
	lu := iscsitest.NewSharedLU(1024, 0x1234, false)
	silent := make(chan struct{})
	defer close(silent)
	var mute sync.Once
	var muted time.Time
	lu.Stall = func(rtp uint16, cdb []byte) <-chan struct{} {
		var ch <-chan struct{}
		if rtp == 1 {
			mute.Do(func() { ch, muted = silent, time.Now() })
		}
		return ch
	}
	x := dialMP(t, twoPorts(lu, 1, 1), func(c *initiator.MultipathConfig) {
		for i := range c.Paths {
			c.Paths[i].Session.NOPInterval, c.Paths[i].Session.NOPTimeout = 2*time.Second, 2*time.Second
		}
	})
	var worst time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				start := time.Now()
				if err := x.rw(int64(w*100+i*2), 1, byte(w)); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				worst = max(worst, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if muted.IsZero() {
		t.Fatal("path 1 never went silent")
	}
	t.Logf("worst write+read across the silent path: %v", worst)
	if worst > 5*time.Second {
		t.Errorf("a command waited %v for the failover, want at most 5 s", worst)
	}
	if p := x.m.Paths()[0]; p.State == initiator.PathUp && p.Nexus.Faults == 0 {
		t.Errorf("the silent path was never declared down: %+v", p)
	}
}

// TestMultipathStandbyPathFailsBackWithoutUnitAttention: a path in
// standby is probed (REPORT TARGET PORT GROUPS) every probe interval, so
// it takes I/O again once its group is active even when the target raises
// no UNIT ATTENTION.
func TestMultipathStandbyPathFailsBackWithoutUnitAttention(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	x := dialMP(t, twoPorts(lu, 1, 2), func(c *initiator.MultipathConfig) { c.ProbeInterval = 100 * time.Millisecond })
	lu.SetState(1, scsi.AccessStandby, false)
	if err := x.rw(0, 8, 1); err != nil {
		t.Fatal(err)
	}
	x.waitState(0, initiator.PathStandby)
	lu.SetState(1, scsi.AccessActiveOptimized, false)
	start := time.Now()
	x.waitState(0, initiator.PathUp)
	t.Logf("back up %v after its group became active", time.Since(start))
	before := x.ios()
	if err := x.rw(20, 8, 2); err != nil {
		t.Fatal(err)
	}
	if after := x.ios(); after[0] == before[0] {
		t.Errorf("path 0 took no I/O after failback (%v -> %v)", before, after)
	}
}

// TestMultipathPathDownAtLoginJoinsLater: a path whose portal refuses the
// first login does not stop the volume; it is tried again in the
// background and carries I/O once it logs in and passes its check.
func TestMultipathPathDownAtLoginJoinsLater(t *testing.T) {
	lu := iscsitest.NewSharedLU(1024, 0x1234, true)
	lu.SetDown(2, true)
	x := dialMP(t, twoPorts(lu, 1, 2), nil)
	if p := x.m.Paths()[1]; p.State != initiator.PathDown || p.LastError == "" || p.Nexus.State == initiator.NexusUp {
		t.Fatalf("path 1 at login: %+v", p)
	}
	if err := x.rw(0, 4, 1); err != nil {
		t.Fatal(err)
	}
	lu.SetDown(2, false)
	x.waitState(1, initiator.PathUp)
	before := x.ios()
	if err := x.rw(10, 8, 2); err != nil {
		t.Fatal(err)
	}
	if after := x.ios(); after[1] == before[1] {
		t.Errorf("the late path took no I/O (%v -> %v)", before, after)
	}
}

// TestMultipathPathSelector: with path 1's target slow (every READ held
// 5 ms, so its commands queue up), round-robin still sends every other
// command to it, while queue-length sends most new commands to path 2,
// which has none in flight.
func TestMultipathPathSelector(t *testing.T) {
	for _, tc := range []struct {
		sel      initiator.PathSelector
		min, max float64 // path 2's share of the reads
	}{
		{initiator.SelectRoundRobin, 0.4, 0.6},
		{initiator.SelectQueueLength, 0.8, 1},
	} {
		t.Run(tc.sel.String(), func(t *testing.T) {
			lu := iscsitest.NewSharedLU(1024, 0x1234, false)
			var slow atomic.Bool
			lu.Stall = func(rtp uint16, cdb []byte) <-chan struct{} {
				if rtp != 1 || !slow.Load() || (cdb[0] != 0x28 && cdb[0] != 0x88) {
					return nil
				}
				ch := make(chan struct{})
				time.AfterFunc(5*time.Millisecond, func() { close(ch) })
				return ch
			}
			x := dialMP(t, twoPorts(lu, 1, 1), func(c *initiator.MultipathConfig) { c.Selector = tc.sel })
			slow.Store(true)
			before := x.ios()
			const workers, reads = 8, 30
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 512)
					for i := range reads {
						if err := x.l.ReadAt(context.Background(), buf, int64(w*reads+i)*512); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			after := x.ios()
			a, b := after[0]-before[0], after[1]-before[1]
			if share := float64(b) / float64(a+b); share < tc.min || share > tc.max {
				t.Errorf("%v: path 1 (slow) carried %d reads, path 2 %d: path 2's share %.2f, want %.2f to %.2f",
					tc.sel, a, b, share, tc.min, tc.max)
			}
			t.Logf("%v: slow path %d reads, fast path %d", tc.sel, a, b)
		})
	}
}
