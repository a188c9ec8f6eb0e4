package initiator_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestTgtdMultipathSurvivesDroppedPaths: one tgtd LUN through two portals
// (127.0.0.1 and 127.0.0.2 on the same port; tgt has no ALUA, so both are
// active/optimized), writers and readers on both paths, and one path's
// connection closed by the target again and again. No I/O may fail, and
// every block must hold its last acknowledged write.
func TestTgtdMultipathSurvivesDroppedPaths(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, port, _ := net.SplitHostPort(srv.Portal())
	second := net.JoinHostPort("127.0.0.2", port)
	if _, err := srv.Tgtadm(ctx, "--mode", "portal", "--op", "new", "--param", "portal="+second); err != nil {
		t.Fatalf("second portal: %v", err)
	}
	logs := &syncBuffer{}
	log := zerolog.New(logs).With().Timestamp().Logger()
	cfg := initiator.MultipathConfig{NoPathTimeout: 10 * time.Second, Logger: log}
	for i, portal := range []string{srv.Portal(), second} {
		cfg.Paths = append(cfg.Paths, initiator.NexusConfig{
			Portals: []string{portal},
			Dial:    initiator.DialConfig{Transport: initiator.TransportTCP, Logger: log},
			Session: initiator.SessionConfig{
				LoginConfig: initiator.LoginConfig{InitiatorName: recoveryInitiator, TargetName: srv.IQN(),
					ISID: initiator.ISIDFromName("mp" + strconv.Itoa(i))},
				QueueDepth: 32, NOPInterval: 500 * time.Millisecond, NOPTimeout: time.Second, Logger: log,
			},
			LoginTimeout: 2 * time.Second, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Logger: log,
		})
	}
	m, err := initiator.DialMultipath(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		m.Close()
		if t.Failed() {
			t.Logf("multipath log:\n%s", logs.String())
		}
	}()
	l, err := initiator.OpenLUN(ctx, m, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range m.Paths() {
		if p.State != initiator.PathUp {
			t.Fatalf("path %d: %+v", i, p)
		}
	}

	// Four writers, each on its own 256 blocks, stamp every block with its
	// LBA and a generation and read it back at once.
	const writers, span = 4, 256
	var stop atomic.Bool
	var wg sync.WaitGroup
	last := make([][]uint64, writers)
	errs := make(chan error, writers)
	var ops atomic.Int64
	for w := range writers {
		last[w] = make([]uint64, span)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, got := make([]byte, 4096), make([]byte, 4096)
			for gen := uint64(1); !stop.Load(); gen++ {
				i := uint64((gen * 7) % (span / 8) * 8)
				lba := uint64(w*span) + i
				for b := range uint64(8) {
					stampBlock(buf[b*512:(b+1)*512], lba+b, gen)
				}
				var err error
				if gen%2 == 0 {
					ch := make(chan error, 1)
					l.StartWrite(buf, int64(lba)*512, false, doneFunc(func(err error) { ch <- err }), 0)
					err = <-ch
				} else {
					err = l.WriteAt(context.Background(), buf, int64(lba)*512, false)
				}
				if err != nil {
					errs <- fmt.Errorf("write at %d: %w", lba, err)
					return
				}
				for b := range uint64(8) {
					last[w][i+b] = gen
				}
				if err := l.ReadAt(context.Background(), got, int64(lba)*512); err != nil {
					errs <- fmt.Errorf("read at %d: %w", lba, err)
					return
				}
				for b := range uint64(8) {
					if g := blockGen(got[b*512:(b+1)*512], lba+b); g != int64(gen) {
						errs <- fmt.Errorf("block %d reads generation %d after write %d", lba+b, g, gen)
						return
					}
				}
				ops.Add(1)
			}
		}()
	}
	// Close one connection of the target at a time (the other path goes
	// on), six times, once every path is up again.
	for round := range 6 {
		time.Sleep(300 * time.Millisecond)
		conns, err := srv.Connections(ctx, srv.IQN())
		if err != nil || len(conns) == 0 {
			t.Fatalf("round %d: connections %v: %v", round, conns, err)
		}
		c := conns[round%len(conns)]
		if _, err := srv.Tgtadm(ctx, "--mode", "connection", "--op", "delete", "--tid", "1",
			"--sid", strconv.Itoa(int(c.TSIH)), "--cid", strconv.FormatUint(uint64(c.CID), 10)); err != nil {
			t.Fatalf("round %d: drop connection: %v", round, err)
		}
		before := ops.Load()
		deadline := time.Now().Add(10 * time.Second)
		for {
			up := 0
			for _, p := range m.Paths() {
				if p.State == initiator.PathUp {
					up++
				}
			}
			if up == 2 && ops.Load() > before+10 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: paths %+v, %d ops since the drop", round, m.Paths(), ops.Load()-before)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := make([]byte, 512)
	for w := range writers {
		for i := range uint64(span) {
			lba := uint64(w*span) + i
			if err := l.ReadAt(ctx, got, int64(lba)*512); err != nil {
				t.Fatal(err)
			}
			if g := blockGen(got, lba); g != int64(last[w][i]) {
				t.Errorf("block %d holds generation %d, last acknowledged %d", lba, g, last[w][i])
			}
		}
	}
	var failovers uint64
	for _, p := range m.Paths() {
		failovers += p.Failovers
		t.Logf("path %s: %d I/Os, %d moved to the other path, last error %q", p.Portal, p.IOs, p.Failovers, p.LastError)
	}
	t.Logf("%d write+read rounds", ops.Load())
	if st := m.Status(); st.Faults < 6 {
		t.Errorf("%d sessions lost, want 6", st.Faults)
	}
}
