package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

type fakeSession struct{ st SessionStatus }

func (f *fakeSession) SessionStatus() SessionStatus { return f.st }

type fakePaths []PathStatus

func (f fakePaths) PathStatuses() []PathStatus { return f }

type fakeTimeouts uint64

func (f fakeTimeouts) CommandTimeouts() uint64 { return uint64(f) }

// series finds the metric of family fam whose labels include want.
func series(t *testing.T, fams map[string]*dto.MetricFamily, fam string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[fam]
	if !ok {
		t.Fatalf("no family %s", fam)
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s series with %v", fam, want)
	return nil
}

func gather(t *testing.T, c *Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg, err := NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestCollector(t *testing.T) {
	var io1, io2 IO
	io1.End(OpWrite, 8192, io1.Begin(), nil)
	io1.End(OpWrite, 4096, io1.Begin(), errors.New("EIO"))
	io1.inflight.Add(1)
	io1.End(OpRead, 512, time.Now().Add(-3*time.Millisecond), nil)
	io1.Begin() // one in flight
	sess := &fakeSession{SessionStatus{State: "recovering", Recoveries: 3}}
	paths := fakePaths{{Portal: "10.0.0.1:3260", Up: true, IOs: 10, Failovers: 0}, {Portal: "10.0.1.1:3260", IOs: 4, Failovers: 2}}
	c := NewCollector(Volume{Labels: Labels{Volume: "db", Target: "iqn.x:t", LUN: 1}, IO: &io1, Session: sess, Timeouts: fakeTimeouts(7), Paths: paths})
	remove := c.Add(Volume{Labels: Labels{Volume: "logs", Target: "iqn.x:t", LUN: 2}, IO: &io2})
	fams := gather(t, c)
	db := map[string]string{"volume": "db", "target": "iqn.x:t", "lun": "1"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range db {
			m[a] = b
		}
		return m
	}
	if v := series(t, fams, "iser_attach_io_total", with("op", "write")).GetCounter().GetValue(); v != 2 {
		t.Errorf("io_total write %v", v)
	}
	if v := series(t, fams, "iser_attach_io_bytes_total", with("op", "write")).GetCounter().GetValue(); v != 12288 {
		t.Errorf("io_bytes_total write %v", v)
	}
	if v := series(t, fams, "iser_attach_io_errors_total", with("op", "write")).GetCounter().GetValue(); v != 1 {
		t.Errorf("io_errors_total write %v", v)
	}
	if v := series(t, fams, "iser_attach_io_total", with("op", "discard")).GetCounter().GetValue(); v != 0 {
		t.Errorf("io_total discard %v", v)
	}
	h := series(t, fams, "iser_attach_io_latency_seconds", with("op", "read")).GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() < 0.003 || len(h.GetBucket()) != len(LatencyBounds) {
		t.Fatalf("read histogram: count %d sum %v buckets %d", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()))
	}
	for _, b := range h.GetBucket() { // cumulative: 1 from the bucket of the one read's latency on
		want := uint64(0)
		if b.GetUpperBound() >= h.GetSampleSum() {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("read bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if v := series(t, fams, "iser_attach_inflight", db).GetGauge().GetValue(); v != 1 {
		t.Errorf("inflight %v", v)
	}
	for _, s := range SessionStates {
		want := 0.0
		if s == "recovering" {
			want = 1
		}
		if v := series(t, fams, "iser_attach_session_state", with("state", s)).GetGauge().GetValue(); v != want {
			t.Errorf("session_state %s = %v, want %v", s, v, want)
		}
	}
	if v := series(t, fams, "iser_attach_session_recoveries_total", db).GetCounter().GetValue(); v != 3 {
		t.Errorf("recoveries %v", v)
	}
	if v := series(t, fams, "iser_attach_command_timeouts_total", db).GetCounter().GetValue(); v != 7 {
		t.Errorf("command timeouts %v", v)
	}
	for _, p := range paths {
		up := 0.0
		if p.Up {
			up = 1
		}
		if v := series(t, fams, "iser_attach_path_up", with("portal", p.Portal)).GetGauge().GetValue(); v != up {
			t.Errorf("path_up %s = %v", p.Portal, v)
		}
		if v := series(t, fams, "iser_attach_path_commands_total", with("portal", p.Portal)).GetCounter().GetValue(); v != float64(p.IOs) {
			t.Errorf("path_commands_total %s = %v", p.Portal, v)
		}
		if v := series(t, fams, "iser_attach_path_failovers_total", with("portal", p.Portal)).GetCounter().GetValue(); v != float64(p.Failovers) {
			t.Errorf("path_failovers_total %s = %v", p.Portal, v)
		}
	}
	if n := len(fams["iser_attach_path_up"].GetMetric()); n != 2 {
		t.Errorf("%d path_up series, want 2 (db's paths only)", n)
	}
	// The second volume has no session reporter and no timeout counter:
	// it has I/O series only.
	series(t, fams, "iser_attach_io_total", map[string]string{"volume": "logs", "op": "read"})
	if n := len(fams["iser_attach_command_timeouts_total"].GetMetric()); n != 1 {
		t.Errorf("%d command timeout series, want 1 (db only)", n)
	}
	if n := len(fams["iser_attach_session_state"].GetMetric()); n != len(SessionStates) {
		t.Errorf("%d session state series, want %d", n, len(SessionStates))
	}
	remove()
	fams = gather(t, c)
	if n := len(fams["iser_attach_inflight"].GetMetric()); n != 1 {
		t.Errorf("%d volumes after remove, want 1", n)
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func TestServer(t *testing.T) {
	var m IO
	reg, err := NewRegistry(NewCollector(Volume{Labels: Labels{Volume: "v", Target: "iqn.x:t"}, IO: &m,
		Session: &fakeSession{SessionStatus{State: "attached"}}}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, reg)
	url := "http://" + s.Addr().String() + Path
	before := series(t, scrape(t, url), "iser_attach_io_total", map[string]string{"op": "write"}).GetCounter().GetValue()
	for i := 0; i < 5; i++ {
		m.End(OpWrite, 4096, m.Begin(), nil)
	}
	fams := scrape(t, url)
	if after := series(t, fams, "iser_attach_io_total", map[string]string{"op": "write"}).GetCounter().GetValue(); after-before != 5 {
		t.Errorf("io_total write went from %v to %v, want +5", before, after)
	}
	if v := series(t, fams, "iser_attach_session_state", map[string]string{"state": "attached"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("attached = %v", v)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	if resp, err := http.Get("http://" + s.Addr().String() + "/other"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %v %v", resp, err)
	}
	// A client that never finishes its request header is cut off by the
	// server, and does not hold up Close.
	slow, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.Write([]byte("GET /metrics HTTP/1.1\r\n"))
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("still serving after Close")
	} else if !strings.Contains(err.Error(), "refused") {
		t.Logf("after Close: %v", err)
	}
}
