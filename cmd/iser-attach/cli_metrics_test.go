package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// scrapeMetrics GETs url and parses the Prometheus text format.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: %s\n%s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return fams
}

// metricValue is the value of family name's series whose labels include
// want: a counter's or gauge's value, a histogram's sample count. It fails
// the test when there is no such series.
func metricValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == k && lp.GetValue() == v
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no %s series with %v", name, want)
	return 0
}

var metricsURL = regexp.MustCompile(`url=(http://\S+/metrics)`)

// TestServeMetrics runs serve with --metrics-listen against tgtd, does
// I/O through the NBD export with qemu-io and checks that the scraped
// counters moved by exactly that I/O, as tgtd saw it.
func TestServeMetrics(t *testing.T) {
	need(t, "qemu-io")
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 64 << 20, BlockSize: 4096}}})
	uri, logs := startServe(t, srv, nil, "1", "--metrics-listen", "tcp:127.0.0.1:0")
	m := metricsURL.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics URL logged:\n%s", logs.String())
	}
	url := m[1]
	vol := map[string]string{"volume": defaultVolumeName(srv.IQN(), 1), "target": srv.IQN(), "lun": "1"}
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range vol {
			out[a] = b
		}
		return out
	}
	targetWrites := func() int {
		if err := srv.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		return srv.Commands(1, tgttest.OpWrite10).Done + srv.Commands(1, tgttest.OpWrite16).Done
	}

	before := scrapeMetrics(t, url)
	tgtBefore := targetWrites()
	const writes, reads, size = 8, 4, 64 << 10
	args := []string{"-f", "raw"}
	for i := 0; i < writes; i++ {
		args = append(args, "-c", fmt.Sprintf("write -P 0x%02x %d %d", 0x40+i, i*size, size))
	}
	for i := 0; i < reads; i++ {
		args = append(args, "-c", fmt.Sprintf("read -P 0x%02x %d %d", 0x40+i, i*size, size))
	}
	sh(t, "qemu-io", append(args, "-c", "flush", uri)...)
	after := scrapeMetrics(t, url)
	tgtAfter := targetWrites()

	delta := func(name string, labels map[string]string) float64 {
		return metricValue(t, after, name, labels) - metricValue(t, before, name, labels)
	}
	if d := delta("iser_attach_io_total", with("op", "write")); d != writes {
		t.Errorf("io_total{op=write} went up by %v, want %d", d, writes)
	}
	if d := float64(tgtAfter - tgtBefore); d != writes {
		t.Errorf("tgtd saw %v WRITEs, want %d", d, writes)
	}
	if d := delta("iser_attach_io_bytes_total", with("op", "write")); d != writes*size {
		t.Errorf("io_bytes_total{op=write} went up by %v, want %d", d, writes*size)
	}
	if d := delta("iser_attach_io_latency_seconds", with("op", "write")); d != writes {
		t.Errorf("write latency histogram count went up by %v, want %d", d, writes)
	}
	if d := delta("iser_attach_io_total", with("op", "read")); d < reads {
		t.Errorf("io_total{op=read} went up by %v, want at least %d", d, reads)
	}
	if d := delta("iser_attach_io_bytes_total", with("op", "read")); d < reads*size {
		t.Errorf("io_bytes_total{op=read} went up by %v, want at least %d", d, reads*size)
	}
	if d := delta("iser_attach_io_total", with("op", "flush")); d < 1 {
		t.Errorf("io_total{op=flush} went up by %v, want at least 1", d)
	}
	for _, op := range []string{"read", "write", "flush"} {
		if v := metricValue(t, after, "iser_attach_io_errors_total", with("op", op)); v != 0 {
			t.Errorf("io_errors_total{op=%s} = %v", op, v)
		}
	}
	// The latency sum moved by at least the time tgtd took: more than 0.
	h := func(fams map[string]*dto.MetricFamily) float64 {
		for _, mm := range fams["iser_attach_io_latency_seconds"].GetMetric() {
			for _, lp := range mm.GetLabel() {
				if lp.GetName() == "op" && lp.GetValue() == "write" {
					return mm.GetHistogram().GetSampleSum()
				}
			}
		}
		t.Fatal("no write latency histogram")
		return 0
	}
	if d := h(after) - h(before); d <= 0 {
		t.Errorf("write latency sum went up by %v", d)
	}
	if v := metricValue(t, after, "iser_attach_inflight", vol); v != 0 {
		t.Errorf("inflight %v with no client", v)
	}
	for _, st := range []string{"attached", "recovering", "failed", "closed"} {
		want := 0.0
		if st == "attached" {
			want = 1
		}
		if v := metricValue(t, after, "iser_attach_session_state", with("state", st)); v != want {
			t.Errorf("session_state{state=%s} = %v, want %v", st, v, want)
		}
	}
	if v := metricValue(t, after, "iser_attach_session_recoveries_total", vol); v != 0 {
		t.Errorf("recoveries %v", v)
	}
	if v := metricValue(t, after, "iser_attach_command_timeouts_total", vol); v != 0 {
		t.Errorf("command timeouts %v", v)
	}
	if !strings.Contains(logs.String(), "loopback_only=true") {
		t.Errorf("the metrics address is not logged as loopback:\n%s", logs.String())
	}
}

// TestServeMetricsListenErrors: a bad --metrics-listen fails serve at once,
// before any login, with one line naming the flag: a usage mistake (exit
// 2) for a malformed address, a failure (exit 1) for a busy port.
func TestServeMetricsListenErrors(t *testing.T) {
	busy := busyPort(t)
	for _, spec := range []string{"127.0.0.1:9464", "udp:127.0.0.1:9464", "tcp:" + busy} {
		_, errs, err := run(t, nil, "serve", "--portal", "127.0.0.1:1", "--target", "iqn.2026-11.test:none",
			"--listen", "unix:"+t.TempDir()+"/nbd.sock", "--metrics-listen", spec)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		last := lines[len(lines)-1]
		prefix, code := "iser-attach: serve: --metrics-listen: ", 2
		if strings.HasPrefix(spec, "tcp:") {
			prefix, code = "iser-attach: --metrics-listen: ", 1
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != code || !strings.HasPrefix(last, prefix) || strings.Contains(errs, "connection refused") {
			t.Errorf("--metrics-listen %s: %v, last line %q\n%s", spec, err, last, errs)
		}
	}
}

// busyPort holds a TCP port for the test's duration and returns its
// HOST:PORT.
func busyPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestServeMetricsSessionState freezes tgtd for 4 s while qemu-io writes
// through serve with the keepalive off: the command timeout (500 ms) ends
// the hung session. The scraped session state shows recovering meanwhile;
// afterwards attached, with a recovery and a command timeout counted, and
// no write failed.
func TestServeMetricsSessionState(t *testing.T) {
	need(t, "qemu-io")
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	uri, logs := startServe(t, srv, nil, "1", "--metrics-listen", "tcp:127.0.0.1:0",
		"--nop-interval", "0", "--command-timeout", "500ms", "--replacement-timeout", "60s")
	m := metricsURL.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics URL logged:\n%s", logs.String())
	}
	url := m[1]
	lun := map[string]string{"lun": "1"}
	state := func(fams map[string]*dto.MetricFamily, s string) float64 {
		return metricValue(t, fams, "iser_attach_session_state", map[string]string{"state": s})
	}
	recoveries := func(fams map[string]*dto.MetricFamily) float64 {
		return metricValue(t, fams, "iser_attach_session_recoveries_total", lun)
	}
	timeouts := func(fams map[string]*dto.MetricFamily) float64 {
		return metricValue(t, fams, "iser_attach_command_timeouts_total", lun)
	}
	fams := scrapeMetrics(t, url)
	if state(fams, "attached") != 1 || recoveries(fams) != 0 || timeouts(fams) != 0 {
		t.Fatalf("before the stall: attached %v, recoveries %v, command timeouts %v",
			state(fams, "attached"), recoveries(fams), timeouts(fams))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stalled := make(chan error, 1)
	go func() { stalled <- srv.Stall(ctx, 4*time.Second) }()
	// Writes until the stall is over: one of them hangs in it.
	stallOver := make(chan struct{})
	writes := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			out, err := exec.CommandContext(ctx, "qemu-io", "-f", "raw", "-c",
				fmt.Sprintf("write -P 0x%02x %d 65536", i%256, (i%64)*65536), uri).CombinedOutput()
			if err != nil {
				writes <- fmt.Errorf("qemu-io write %d: %v\n%s", i, err, out)
				return
			}
			select {
			case <-stallOver:
				writes <- nil
				return
			default:
			}
		}
	}()
	// waitFor scrapes until cond holds; the deadline only bounds a hang.
	waitFor := func(what string, cond func(map[string]*dto.MetricFamily) bool) {
		t.Helper()
		for {
			if cond(scrapeMetrics(t, url)) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("never saw %s", what)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	waitFor("session_state recovering = 1 during the stall", func(f map[string]*dto.MetricFamily) bool {
		return state(f, "recovering") == 1 && state(f, "attached") == 0
	})
	if err := <-stalled; err != nil {
		t.Fatal(err)
	}
	close(stallOver)
	if err := <-writes; err != nil {
		t.Fatal(err)
	}
	waitFor("session_state attached = 1 and a recovery counted after the stall", func(f map[string]*dto.MetricFamily) bool {
		return state(f, "attached") == 1 && state(f, "recovering") == 0 && recoveries(f) >= 1
	})
	if n := timeouts(scrapeMetrics(t, url)); n < 1 {
		t.Errorf("command_timeouts_total %v after a write hung past the command timeout", n)
	}
}
