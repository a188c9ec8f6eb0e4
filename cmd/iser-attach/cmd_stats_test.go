package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/metrics"
	"github.com/iser-attach/iser-attach/volume"
)

// scriptedVolume serves a control socket whose stats requests return
// snaps in turn (the last one again once they run out).
type scriptedVolume struct {
	name  string
	mu    sync.Mutex
	snaps []volume.Stats
	asked int
}

func (s *scriptedVolume) Status() volume.Status {
	return volume.Status{Name: s.name, Device: "/dev/nbd7", State: "attached"}
}

func (s *scriptedVolume) Detach(context.Context, bool) error { return nil }

func (s *scriptedVolume) Stats() volume.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.snaps[min(s.asked, len(s.snaps)-1)]
	s.asked++
	return st
}

func (s *scriptedVolume) reset() {
	s.mu.Lock()
	s.asked = 0
	s.mu.Unlock()
}

func (s *scriptedVolume) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

// opStats is count I/Os of bytes each, split evenly over the buckets idx.
func opStats(count, bytes uint64, errs uint64, idx ...int) metrics.OpStats {
	st := metrics.OpStats{Count: count, Bytes: count * bytes, Errors: errs, Buckets: make([]uint64, len(metrics.LatencyBounds)+1)}
	for _, i := range idx {
		st.Buckets[i] += count / uint64(len(idx))
	}
	return st
}

func snapshot(ops map[metrics.Op]metrics.OpStats, inflight int64) metrics.Snapshot {
	s := metrics.Snapshot{Inflight: inflight, BoundsSeconds: metrics.BoundsSeconds(), Ops: map[string]metrics.OpStats{}}
	for _, op := range metrics.Ops {
		st, ok := ops[op]
		if !ok {
			st = opStats(0, 0, 0)
		}
		s.Ops[op.String()] = st
	}
	return s
}

// runStatsCLI runs `iser-attach stats ARGS...` in process.
func runStatsCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := &cli.App{Name: "iser-attach", Commands: []*cli.Command{statsCommand()}, Writer: &out, ErrWriter: &out,
		ExitErrHandler: func(*cli.Context, error) {}}
	setUsageErrorHandlers(app.Commands)
	err := runApp(app, append([]string{"iser-attach", "stats"}, args...))
	return out.String(), err
}

// statsRow finds volume name's row in the output and returns its columns.
func statsRow(t *testing.T, out, name string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return f
		}
	}
	t.Fatalf("no row for %s:\n%s", name, out)
	return nil
}

func TestStatsCommand(t *testing.T) {
	volumeEnv(t)
	const sec = int64(1e9)
	// Between the two samples, 2 s apart: 100 writes of 64 KiB, half of
	// them in the (75 µs, 100 µs] bucket, half in (300 µs, 500 µs]; 20
	// reads of 4 KiB in (1 ms, 1.5 ms]; 4 flushes, 2 of them failed.
	db := &scriptedVolume{name: "db", snaps: []volume.Stats{
		{Name: "db", TimeNanos: 10 * sec, IO: snapshot(map[metrics.Op]metrics.OpStats{
			metrics.OpWrite: opStats(10, 65536, 0, 4)}, 0)},
		{Name: "db", TimeNanos: 12 * sec, IO: snapshot(map[metrics.Op]metrics.OpStats{
			metrics.OpWrite: func() metrics.OpStats {
				s := opStats(110, 65536, 0)
				s.Buckets[4], s.Buckets[8] = 60, 50
				return s
			}(),
			metrics.OpRead:  opStats(20, 4096, 0, 11),
			metrics.OpFlush: opStats(4, 0, 2, 0),
		}, 3)},
	}}
	idle := &scriptedVolume{name: "idle", snaps: []volume.Stats{
		{Name: "idle", TimeNanos: 10 * sec, IO: snapshot(nil, 0)},
		{Name: "idle", TimeNanos: 11 * sec, IO: snapshot(nil, 0)},
	}}
	for _, v := range []*scriptedVolume{db, idle} {
		s, err := volume.ListenControl(v.name, v)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}

	out, err := runStatsCLI(t, "--interval", "10ms", "--count", "1")
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	wantHeader := []string{"r/s", "w/s", "rMiB/s", "wMiB/s", "r_p50_ms", "r_p99_ms", "w_p50_ms", "w_p99_ms", "other/s", "err/s", "inflight"}
	if strings.Join(header[1:], " ") != strings.Join(wantHeader, " ") {
		t.Fatalf("header %q", header)
	}
	// r/s 10, w/s 50, 20*4096/2 s = 0.04 MiB/s, 100*64 KiB/2 s = 3.125 MiB/s.
	// Read p50: rank 10 of 20 in (1 ms, 1.5 ms] = 1.25 ms; p99 = 1.495 ms.
	// Write p50: rank 50 of the 50 in (75, 100] µs = 100 µs; p99: rank 99
	// = 49 of the 50 in (300, 500] µs = 496 µs.
	want := []string{"db", "10", "50", "0.04", "3.12", "1.250", "1.495", "0.100", "0.496", "2", "1", "3"}
	if got := statsRow(t, out, "db"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("db row %q, want %q\n%s", got, want, out)
	}
	wantIdle := []string{"idle", "0", "0", "0.00", "0.00", "-", "-", "-", "-", "0", "0", "0"}
	if got := statsRow(t, out, "idle"); strings.Join(got, " ") != strings.Join(wantIdle, " ") {
		t.Fatalf("idle row %q, want %q\n%s", got, wantIdle, out)
	}

	// NAME picks one volume; flags may follow it.
	db.reset()
	idle.reset()
	out, err = runStatsCLI(t, "db", "--interval", "10ms", "--count", "1")
	if err != nil {
		t.Fatalf("stats db: %v\n%s", err, out)
	}
	statsRow(t, out, "db")
	if strings.Contains(out, "idle") || idle.requests() != 0 {
		t.Fatalf("stats db reported idle:\n%s", out)
	}
	// --count N makes N reports.
	db.reset()
	out, err = runStatsCLI(t, "--count", "3", "--interval", "5ms", "db")
	if err != nil || strings.Count(out, "inflight") != 3 || db.requests() != 4 {
		t.Fatalf("--count 3: %v, %d stats requests\n%s", err, db.requests(), out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuch", "--count", "1"}, "no attached volume"},
		{[]string{"--count", "-1"}, "--count"},
		{[]string{"--interval", "0s"}, "--interval"},
		{[]string{"a", "b"}, "arguments"},
	} {
		if out, err := runStatsCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("stats %q: %v, want an error mentioning %q\n%s", c.args, err, c.want, out)
		}
	}
}

func TestStatsNoVolumes(t *testing.T) {
	volumeEnv(t)
	if _, err := runStatsCLI(t, "--count", "1"); err == nil || !strings.Contains(err.Error(), "no attached volumes") {
		t.Fatalf("stats with nothing attached: %v", err)
	}
}
