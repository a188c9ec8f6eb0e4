package initiator_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// Session recovery against a real tgtd: the target drops its connections
// (tgtadm --mode connection --op delete), crashes and comes back (SIGKILL,
// then a new tgtd on the same portal with the same backing files) or hangs
// (SIGSTOP), while writers keep the nexus busy. Every block written carries
// its LBA and a generation, so what comes back shows which write it holds.

const recoveryInitiator = "iqn.2026-11.io.iser-attach:recovery-test"

// syncBuffer collects the nexus log for the failure report.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// dialRecoveryNexus logs in to srv's first target with fast keepalives and
// backoff and opens LUN 1. The log goes to the test output if it fails.
// mods change the configuration before the login.
func dialRecoveryNexus(t *testing.T, srv *tgttest.Server, replacement time.Duration, mods ...func(*initiator.NexusConfig)) (*initiator.Nexus, *initiator.LUN, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := zerolog.New(logs).With().Timestamp().Logger()
	cfg := initiator.NexusConfig{
		Portals: []string{srv.Portal()},
		Dial:    initiator.DialConfig{Transport: initiator.TransportTCP, Logger: log},
		Session: initiator.SessionConfig{
			LoginConfig: initiator.LoginConfig{InitiatorName: recoveryInitiator, TargetName: srv.IQN(), ISID: initiator.NewISID()},
			QueueDepth:  32, NOPInterval: 500 * time.Millisecond, NOPTimeout: time.Second, Logger: log,
		},
		ReplacementTimeout: replacement,
		LoginTimeout:       2 * time.Second,
		MinBackoff:         50 * time.Millisecond,
		MaxBackoff:         200 * time.Millisecond,
		Logger:             log,
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nx, err := initiator.DialNexus(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nx.Close()
		if t.Failed() {
			t.Logf("nexus log:\n%s", logs.String())
		}
	})
	l, err := initiator.OpenLUN(ctx, nx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return nx, l, logs
}

// stampBlock fills one 512-byte block with its LBA, the generation of the
// write, and bytes derived from both.
func stampBlock(b []byte, lba, gen uint64) {
	binary.LittleEndian.PutUint64(b[0:], lba)
	binary.LittleEndian.PutUint64(b[8:], gen)
	x := lba*0x9e3779b97f4a7c15 ^ gen*0xbf58476d1ce4e5b9 | 1
	for i := 16; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
}

// blockGen returns the generation a block holds: 0 for a never-written
// (zero) block, -1 for anything that is not a block stamped for lba.
func blockGen(b []byte, lba uint64) int64 {
	if bytes.Equal(b, make([]byte, len(b))) {
		return 0
	}
	if binary.LittleEndian.Uint64(b[0:]) != lba {
		return -1
	}
	gen := binary.LittleEndian.Uint64(b[8:])
	want := make([]byte, len(b))
	stampBlock(want, lba, gen)
	if !bytes.Equal(b, want) {
		return -1
	}
	return int64(gen)
}

// blockState is what a block may hold: the generation of the last
// acknowledged write (0: none), or one of the writes that failed after it
// (their data may or may not have reached the target).
type blockState struct {
	acked uint64
	maybe []uint64
}

func (s blockState) allows(gen int64) bool {
	if gen == int64(s.acked) {
		return true
	}
	for _, m := range s.maybe {
		if gen == int64(m) {
			return true
		}
	}
	return false
}

// writeResult is one WriteAt as the writer saw it.
type writeResult struct {
	start, end time.Time
	err        error
}

// regionWriter writes stamped blocks to [first, first+blocks) until stop,
// one write at a time, and keeps the model of what each block holds.
type regionWriter struct {
	first, blocks uint64
	gen           *atomic.Uint64
	state         map[uint64]*blockState
	results       []writeResult
	acked         atomic.Int64
}

func (w *regionWriter) run(l *initiator.LUN, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(w.first, uint64(time.Now().UnixNano())))
	buf := make([]byte, 128*512)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n := 1 + rng.Uint64N(128)
		if rng.IntN(8) == 0 {
			n = 1 + rng.Uint64N(8)
		}
		lba := w.first + rng.Uint64N(w.blocks-n+1)
		gen := w.gen.Add(1)
		p := buf[:n*512]
		for i := uint64(0); i < n; i++ {
			stampBlock(p[i*512:(i+1)*512], lba+i, gen)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r := writeResult{start: time.Now()}
		r.err = l.WriteAt(ctx, p, int64(lba*512), false)
		r.end = time.Now()
		cancel()
		w.results = append(w.results, r)
		for i := uint64(0); i < n; i++ {
			st := w.state[lba+i]
			if st == nil {
				st = &blockState{}
				w.state[lba+i] = st
			}
			if r.err == nil {
				st.acked, st.maybe = gen, nil
			} else {
				st.maybe = append(st.maybe, gen)
			}
		}
		if r.err == nil {
			w.acked.Add(1)
		} else {
			time.Sleep(2 * time.Millisecond) // no busy loop while I/O fails at once
		}
	}
}

// startWriters runs n writers on consecutive regions of blocks blocks from
// firstLBA. The returned function stops them and waits.
func startWriters(l *initiator.LUN, n int, firstLBA, blocks uint64) ([]*regionWriter, func()) {
	var gen atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	ws := make([]*regionWriter, n)
	for i := range ws {
		ws[i] = &regionWriter{first: firstLBA + uint64(i)*blocks, blocks: blocks, gen: &gen, state: map[uint64]*blockState{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[i].run(l, stop)
		}()
	}
	var once sync.Once
	return ws, func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
		})
	}
}

func ackedWrites(ws []*regionWriter) int64 {
	var n int64
	for _, w := range ws {
		n += w.acked.Load()
	}
	return n
}

// staticGen stamps the blocks written before a test's faults.
const staticGen = 1 << 40

// writeStatic fills blocks blocks from firstLBA with generation staticGen.
func writeStatic(t *testing.T, l *initiator.LUN, firstLBA, blocks uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := make([]byte, blocks*512)
	for i := uint64(0); i < blocks; i++ {
		stampBlock(b[i*512:(i+1)*512], firstLBA+i, staticGen)
	}
	if err := l.WriteAt(ctx, b, int64(firstLBA*512), false); err != nil {
		t.Fatal(err)
	}
}

// staticReader reads random ranges of a region written by writeStatic
// until stop and counts reads that fail or return anything else.
type staticReader struct {
	first, blocks uint64
	reads, bad    atomic.Int64
	mu            sync.Mutex
	errs          []error
	longest       time.Duration
}

func (r *staticReader) run(l *initiator.LUN, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(r.first, uint64(time.Now().UnixNano())))
	buf := make([]byte, 1024*512)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n := 1 + rng.Uint64N(1024) // up to 512 KiB: Data-In in many PDUs
		lba := r.first + rng.Uint64N(r.blocks-n+1)
		p := buf[:n*512]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		err := l.ReadAt(ctx, p, int64(lba*512))
		took := time.Since(start)
		cancel()
		r.reads.Add(1)
		if err == nil {
			for i := uint64(0); i < n; i++ {
				if g := blockGen(p[i*512:(i+1)*512], lba+i); g != staticGen {
					err = fmt.Errorf("read of %d blocks at LBA %d: LBA %d holds generation %d", n, lba, lba+i, g)
					break
				}
			}
		}
		r.mu.Lock()
		r.longest = max(r.longest, took)
		if err != nil {
			r.bad.Add(1)
			r.errs = append(r.errs, err)
		}
		r.mu.Unlock()
	}
}

// verifyRegions checks every block of the writers' regions, read through
// the LUN and straight from tgtd's backing file, against the model.
func verifyRegions(t *testing.T, l *initiator.LUN, path string, ws []*regionWriter) {
	t.Helper()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	checked, bad := 0, 0
	for _, w := range ws {
		got := make([]byte, w.blocks*512)
		if err := l.ReadAt(ctx, got, int64(w.first*512)); err != nil {
			t.Fatalf("read back region at LBA %d: %v", w.first, err)
		}
		for i := uint64(0); i < w.blocks; i++ {
			lba := w.first + i
			st := blockState{}
			if s := w.state[lba]; s != nil {
				st = *s
			}
			for _, src := range []struct {
				name string
				b    []byte
			}{{"LUN", got[i*512 : (i+1)*512]}, {"backing file", file[lba*512 : (lba+1)*512]}} {
				checked++
				if g := blockGen(src.b, lba); !st.allows(g) {
					bad++
					if bad <= 10 {
						t.Errorf("LBA %d via %s holds generation %d; want %d (acknowledged) or one of the failed writes %v",
							lba, src.name, g, st.acked, st.maybe)
					}
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d block checks failed", bad, checked)
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitProgress waits until the writers have acknowledged more writes.
func waitProgress(t *testing.T, ws []*regionWriter, what string) {
	t.Helper()
	from := ackedWrites(ws)
	waitFor(t, "writes to go on "+what, 5*time.Second, func() bool { return ackedWrites(ws) >= from+20 })
}

// checkOneSession checks tgtd's sessions of the nexus's initiator name:
// one, with the nexus's ISID and current TSIH. tgt drops the
// old session only when its last task is done, so it waits for the list
// to settle. A session tgt still lists after that passes only when it is
// one tgt has closed: it carries the nexus's ISID (the new login
// reinstated it, which makes tgt close every connection of it) and no
// socket to the portal is open but the nexus's one. tgt keeps such a
// session listed while a task of it stays in its SCSI layer (seen once,
// on CI, after ABORT TASK and LOGICAL UNIT RESET reached a tgtd that had
// been stopped).
func checkOneSession(t *testing.T, srv *tgttest.Server, nx *initiator.Nexus, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ours []tgttest.Session
	deadline := time.Now().Add(5 * time.Second)
	for {
		ss, err := srv.Sessions(ctx, srv.IQN())
		if err != nil {
			t.Fatal(err)
		}
		ours = ours[:0]
		for _, s := range ss {
			if s.Initiator == recoveryInitiator {
				ours = append(ours, s)
			}
		}
		tsih := nx.Session().TSIH()
		var current, reinstated int
		for _, s := range ours {
			switch {
			case s.ISID == [6]byte(nx.ISID()) && s.WireTSIH() == tsih:
				current++
			case s.ISID == [6]byte(nx.ISID()):
				reinstated++
			}
		}
		if current == 1 && len(ours) == 1 {
			return
		}
		if time.Now().After(deadline) {
			if current == 1 && current+reinstated == len(ours) {
				n, err := srv.InitiatorSockets()
				if err != nil {
					t.Fatal(err)
				}
				if n == 1 {
					t.Logf("%s: tgtd still lists %d reinstated session(s) of ours, %+v; one socket to the portal is open, the current session's", when, reinstated, ours)
					return
				}
				t.Fatalf("%s: tgtd has sessions %+v for us and %d sockets to the portal are open; want one session with ISID %x and TSIH %d, over one socket", when, ours, n, nx.ISID(), tsih)
			}
			t.Fatalf("%s: tgtd has sessions %+v for us; want one, with ISID %x and TSIH %d", when, ours, nx.ISID(), tsih)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTgtdNexusSurvivesDroppedConnectionsAndRestart runs writers through
// two faults: tgtd closes the connection, then tgtd crashes and is down for
// a second. No write may fail (the outage is shorter than the replacement
// timeout), and every acknowledged write must read back, through the LUN
// and in tgtd's backing file.
func TestTgtdNexusSurvivesDroppedConnectionsAndRestart(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	nx, l, logs := dialRecoveryNexus(t, srv, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A reader goes on alongside the writers over data written before the
	// faults: reads in flight at a fault are reissued too.
	writeStatic(t, l, 0, 2048)
	rd := &staticReader{first: 0, blocks: 2048}
	readStop := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		rd.run(l, readStop)
	}()
	stopReader := sync.OnceFunc(func() {
		close(readStop)
		<-readDone
	})
	defer stopReader()
	ws, stop := startWriters(l, 4, 2048, 2048)
	defer stop()
	waitProgress(t, ws, "before the faults")
	time.Sleep(300 * time.Millisecond)

	// Fault 1: the target drops the connection.
	n, err := srv.DropConnections(ctx, srv.IQN())
	if err != nil || n != 1 {
		t.Fatalf("DropConnections: %d, %v; want our 1 connection closed", n, err)
	}
	waitFor(t, "recovery from the dropped connection", 5*time.Second, func() bool {
		st := nx.Status()
		return st.Recoveries >= 1 && st.State == initiator.NexusUp
	})
	checkOneSession(t, srv, nx, "after the dropped connection")
	waitProgress(t, ws, "after the dropped connection")
	time.Sleep(300 * time.Millisecond)

	// Fault 2: tgtd crashes and comes back after a second.
	restartAt := time.Now()
	if err := srv.Restart(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "recovery from the restart", 5*time.Second, func() bool {
		st := nx.Status()
		return st.Recoveries >= 2 && st.State == initiator.NexusUp
	})
	t.Logf("back %v after the crash", time.Since(restartAt).Round(time.Millisecond))
	checkOneSession(t, srv, nx, "after the restart")
	waitProgress(t, ws, "after the restart")
	time.Sleep(300 * time.Millisecond)
	stop()
	stopReader()

	var total, failed int
	var longest time.Duration
	for _, w := range ws {
		for _, r := range w.results {
			total++
			longest = max(longest, r.end.Sub(r.start))
			if r.err != nil {
				failed++
				if failed <= 5 {
					t.Errorf("write failed although the outage was shorter than the replacement timeout: %v", r.err)
				}
			}
		}
	}
	for i, err := range rd.errs {
		if i < 5 {
			t.Errorf("read: %v", err)
		}
	}
	if rd.bad.Load() > 0 {
		t.Errorf("%d of %d reads failed or returned wrong data", rd.bad.Load(), rd.reads.Load())
	}
	st := nx.Status()
	if st.Recoveries < 2 || st.Faults < 2 || st.State != initiator.NexusUp {
		t.Errorf("status %+v, want up after at least 2 faults and 2 recoveries", st)
	}
	verifyRegions(t, l, srv.LUNPath(srv.IQN(), 1), ws)
	t.Logf("faults survived: %d (recoveries %d); %d writes, %d failed, %d reads, %d bad, %d commands reissued, longest write %v, longest read %v",
		st.Faults, st.Recoveries, total, failed, rd.reads.Load(), rd.bad.Load(),
		strings.Count(logs.String(), "command reissued after session failure"),
		longest.Round(time.Millisecond), rd.longest.Round(time.Millisecond))
}

// TestTgtdNexusReplacementTimeout crashes tgtd for three seconds with a
// one-second replacement timeout: writes fail with EIO after about a
// second instead of hanging, and once tgtd is back the nexus recovers by
// itself, with the data acknowledged before the crash intact.
func TestTgtdNexusReplacementTimeout(t *testing.T) {
	const replacement = time.Second
	const down = 3 * time.Second
	const margin = time.Second
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	nx, l, _ := dialRecoveryNexus(t, srv, replacement)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	writeStatic(t, l, 0, 2048)
	before := make([]byte, 1<<20)
	if err := l.ReadAt(ctx, before, 0); err != nil {
		t.Fatal(err)
	}

	ws, stop := startWriters(l, 2, 4096, 2048)
	defer stop()
	waitProgress(t, ws, "before the crash")

	oldDone := srv.Done()
	restarted := make(chan error, 1)
	go func() { restarted <- srv.Restart(ctx, down) }()
	<-oldDone
	killAt := time.Now()

	// A write issued while tgtd is down waits for about the replacement
	// timeout, then fails with EIO.
	probeCtx, probeCancel := context.WithTimeout(ctx, replacement+5*time.Second)
	probeErr := l.WriteAt(probeCtx, before[:4096], 0, false)
	probeCancel()
	probeTook := time.Since(killAt)
	var en interface{ Errno() syscall.Errno }
	if !errors.As(probeErr, &en) || en.Errno() != syscall.EIO || !errors.Is(probeErr, initiator.ErrReplacementTimeout) {
		t.Errorf("write while tgtd is down: %v; want the replacement timeout as EIO", probeErr)
	}
	if probeTook > replacement+margin {
		t.Errorf("the write issued at the crash failed after %v; want about %v", probeTook, replacement)
	}
	if st := nx.Status(); st.State != initiator.NexusFailed {
		t.Errorf("state %v after the replacement timeout, want failed", st.State)
	}
	// New writes now fail at once.
	quick := time.Now()
	if err := l.WriteAt(ctx, before[:512], 0, false); !errors.As(err, &en) || en.Errno() != syscall.EIO {
		t.Errorf("write after the replacement timeout: %v, want EIO", err)
	} else if d := time.Since(quick); d > 500*time.Millisecond {
		t.Errorf("write after the replacement timeout took %v to fail", d)
	}

	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	waitFor(t, "the nexus to recover by itself", 5*time.Second, func() bool { return nx.Status().State == initiator.NexusUp })
	upAt := time.Now()
	t.Logf("probe failed after %v; tgtd back %v after the crash, nexus up %v later",
		probeTook.Round(time.Millisecond), backAt.Sub(killAt).Round(time.Millisecond), upAt.Sub(backAt).Round(time.Millisecond))
	checkOneSession(t, srv, nx, "after the restart")
	waitProgress(t, ws, "after recovery")
	stop()

	var failed, okDuringOutage int
	for _, w := range ws {
		for _, r := range w.results {
			if r.err == nil {
				if r.start.After(killAt) && r.end.Before(backAt) {
					okDuringOutage++
				}
				continue
			}
			failed++
			if !errors.As(r.err, &en) || en.Errno() != syscall.EIO {
				t.Errorf("write failed with %v, want EIO", r.err)
			}
			if d := r.end.Sub(r.start); d > replacement+margin {
				t.Errorf("a write took %v to fail; want at most about %v", d, replacement)
			}
			if r.start.After(upAt) {
				t.Errorf("a write issued after recovery failed: %v", r.err)
			}
		}
	}
	if failed == 0 {
		t.Error("no writer saw a failure during a 3 s outage with a 1 s replacement timeout")
	}
	if okDuringOutage > 0 {
		t.Errorf("%d writes succeeded while tgtd was down", okDuringOutage)
	}
	st := nx.Status()
	if st.State != initiator.NexusUp || st.Faults != 1 || st.Recoveries != 1 {
		t.Errorf("status %+v, want up after 1 fault and 1 recovery", st)
	}

	// Writes and reads work again; the data from before the crash is intact.
	roundTrip(t, l, 8<<20, 64<<10)
	got := make([]byte, len(before))
	if err := l.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < uint64(len(got))/512; i++ {
		// The probe writes (the same data) may or may not have landed.
		if g := blockGen(got[i*512:(i+1)*512], i); g != staticGen {
			t.Fatalf("LBA %d written before the crash holds generation %d", i, g)
		}
	}
	verifyRegions(t, l, srv.LUNPath(srv.IQN(), 1), ws)
	t.Logf("%d writes failed with EIO during the outage", failed)
}

// TestTgtdNexusSurvivesAHungTarget freezes tgtd (SIGSTOP) for 3 s under
// writers: the connection stays up but nothing answers, so only the
// keepalive (NOP-Out every 500 ms of silence, 1 s to answer) notices. The
// nexus gives up on the session, its login attempts time out until tgtd
// runs again, and then it reinstates the session; no write fails (the
// replacement timeout is 10 s) and every acknowledged write reads back.
func TestTgtdNexusSurvivesAHungTarget(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	nx, l, logs := dialRecoveryNexus(t, srv, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, stop := startWriters(l, 4, 2048, 2048)
	defer stop()
	waitProgress(t, ws, "before the stall")

	start := time.Now()
	if err := srv.Stall(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := nx.Status(); st.Faults == 0 || !strings.Contains(logs.String(), `"error":"keepalive: no NOP-In within 1s`) {
		t.Errorf("status %+v after a 3 s stall; want the session lost to the keepalive", st)
	}
	waitFor(t, "recovery from the stall", 10*time.Second, func() bool {
		st := nx.Status()
		return st.Recoveries >= 1 && st.State == initiator.NexusUp
	})
	t.Logf("up again %v after the stall began", time.Since(start).Round(time.Millisecond))
	checkOneSession(t, srv, nx, "after the stall")
	waitProgress(t, ws, "after the stall")
	stop()
	var total, failed int
	for _, w := range ws {
		for _, r := range w.results {
			total++
			if r.err != nil {
				failed++
				if failed <= 5 {
					t.Errorf("write failed: %v", r.err)
				}
			}
		}
	}
	verifyRegions(t, l, srv.LUNPath(srv.IQN(), 1), ws)
	st := nx.Status()
	t.Logf("faults survived: %d (recoveries %d); %d writes, %d failed", st.Faults, st.Recoveries, total, failed)
}

// TestTgtdCommandTimeoutEndsAHungTargetWithoutKeepalive freezes tgtd
// (SIGSTOP) for 3 s under writers with the keepalive off: only the command
// timeout (500 ms) notices. ABORT TASK and LOGICAL UNIT RESET go
// unanswered, so the session is dropped; the nexus reinstates it once tgtd
// runs again and reissues the writes. No write fails and every
// acknowledged write reads back.
func TestTgtdCommandTimeoutEndsAHungTargetWithoutKeepalive(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	nx, l, logs := dialRecoveryNexus(t, srv, 10*time.Second, func(c *initiator.NexusConfig) {
		c.Session.NOPInterval = -1
		c.Session.CommandTimeout = 500 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, stop := startWriters(l, 4, 2048, 2048)
	defer stop()
	waitProgress(t, ws, "before the stall")

	if err := srv.Stall(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "recovery from the stall", 10*time.Second, func() bool {
		st := nx.Status()
		return st.Recoveries >= 1 && st.State == initiator.NexusUp
	})
	st := nx.Status()
	if st.CommandTimeouts == 0 || !strings.Contains(logs.String(), "dropping the session") {
		t.Errorf("status %+v after a 3 s stall; want the session dropped after a command timeout", st)
	}
	checkOneSession(t, srv, nx, "after the stall")
	waitProgress(t, ws, "after the stall")
	stop()
	for _, w := range ws {
		for _, r := range w.results {
			if r.err != nil {
				t.Errorf("write failed: %v", r.err)
			}
		}
	}
	verifyRegions(t, l, srv.LUNPath(srv.IQN(), 1), ws)
	t.Logf("command timeouts %d, faults %d, recoveries %d", st.CommandTimeouts, st.Faults, st.Recoveries)
}
