package metrics

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

func TestBucketOf(t *testing.T) {
	last := len(LatencyBounds)
	cases := []struct {
		d    time.Duration
		want int
	}{
		{0, 0},
		{-time.Second, 0}, // a clock step back lands in the first bucket
		{LatencyBounds[0], 0},
		{LatencyBounds[0] + 1, 1},
		{99 * time.Microsecond, 4}, // (75 µs, 100 µs]
		{time.Millisecond, 10},
		{LatencyBounds[last-1], last - 1},
		{LatencyBounds[last-1] + 1, last},
		{time.Hour, last},
	}
	for _, c := range cases {
		if got := bucketOf(c.d); got != c.want {
			t.Errorf("bucketOf(%v) = %d, want %d", c.d, got, c.want)
		}
	}
	// Every duration falls in the bucket whose bound is the first at least it.
	for i := 1; i < last; i++ {
		if LatencyBounds[i] <= LatencyBounds[i-1] {
			t.Fatalf("bounds not increasing at %d", i)
		}
		mid := (LatencyBounds[i-1] + LatencyBounds[i]) / 2
		if got := bucketOf(mid); got != i {
			t.Errorf("bucketOf(%v) = %d, want %d", mid, got, i)
		}
	}
}

func TestIOCounts(t *testing.T) {
	var m IO
	start := m.Begin()
	if m.Inflight() != 1 {
		t.Fatalf("inflight %d after Begin", m.Inflight())
	}
	m.End(OpRead, 4096, start, nil)
	m.End(OpRead, 512, m.Begin(), errors.New("EIO"))
	m.End(OpWrite, 65536, m.Begin(), nil)
	m.End(OpFlush, 0, m.Begin(), nil)
	// A slow one: its start lies 2 s back.
	m.inflight.Add(1)
	m.End(OpWriteZeroes, 1<<20, time.Now().Add(-2*time.Second), nil)
	s := m.Snapshot()
	if s.Inflight != 0 {
		t.Fatalf("inflight %d after every End", s.Inflight)
	}
	want := map[Op][3]uint64{OpRead: {2, 4608, 1}, OpWrite: {1, 65536, 0}, OpFlush: {1, 0, 0}, OpDiscard: {0, 0, 0}, OpWriteZeroes: {1, 1 << 20, 0}}
	for op, w := range want {
		st := s.Op(op)
		if st.Count != w[0] || st.Bytes != w[1] || st.Errors != w[2] {
			t.Errorf("%s: count %d bytes %d errors %d, want %v", op, st.Count, st.Bytes, st.Errors, w)
		}
		if len(st.Buckets) != len(s.BoundsSeconds)+1 {
			t.Fatalf("%s: %d buckets for %d bounds", op, len(st.Buckets), len(s.BoundsSeconds))
		}
	}
	wz := s.Op(OpWriteZeroes)
	if wz.LatencySeconds < 2 || wz.Buckets[bucketOf(2*time.Second)] != 1 {
		t.Errorf("2 s write_zeroes: sum %v, buckets %v", wz.LatencySeconds, wz.Buckets)
	}
}

func TestIOConcurrent(t *testing.T) {
	var m IO
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				m.End(OpWrite, 4096, m.Begin(), nil)
			}
		}()
	}
	wg.Wait()
	st := m.Snapshot().Op(OpWrite)
	if st.Count != 8000 || st.Bytes != 8000*4096 || m.Inflight() != 0 {
		t.Fatalf("count %d bytes %d inflight %d", st.Count, st.Bytes, m.Inflight())
	}
}

func TestIOEndDoesNotAllocate(t *testing.T) {
	var m IO
	err := errors.New("EIO")
	if n := testing.AllocsPerRun(1000, func() {
		m.End(OpRead, 4096, m.Begin(), nil)
		m.End(OpWrite, 4096, m.Begin(), err)
	}); n != 0 {
		t.Fatalf("%v allocations per I/O", n)
	}
}

func TestIOCompleted(t *testing.T) {
	var m IO
	m.End(OpRead, 4096, m.Begin(), nil)
	m.End(OpWrite, 4096, m.Begin(), errors.New("EIO"))
	m.End(OpFlush, 0, m.Begin(), nil)
	_ = m.Begin() // in flight: not completed
	if got := m.Completed(); got != 3 {
		t.Fatalf("Completed %d, want 3", got)
	}
	var sum uint64
	for _, st := range m.Snapshot().Ops {
		sum += st.Count
	}
	if sum != m.Completed() {
		t.Fatalf("Completed %d, the snapshot's counts sum to %d", m.Completed(), sum)
	}
	if n := testing.AllocsPerRun(100, func() { _ = m.Completed() }); n != 0 {
		t.Fatalf("%v allocations per Completed", n)
	}
}

func BenchmarkIOBeginEnd(b *testing.B) {
	var m IO
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.End(OpRead, 4096, m.Begin(), nil)
		}
	})
}

func TestQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004}
	cases := []struct {
		name    string
		q       float64
		buckets []uint64
		want    float64
	}{
		{"all in the first bucket, median", 0.5, []uint64{100, 0, 0, 0}, 0.0005},
		{"all in the second bucket, p99", 0.99, []uint64{0, 100, 0, 0}, 0.001 + 0.001*0.99},
		{"median at the first bucket's top", 0.5, []uint64{50, 50, 0, 0}, 0.001},
		{"p99 in the third", 0.99, []uint64{50, 40, 10, 0}, 0.002 + 0.002*0.9},
		{"beyond the last bound", 0.99, []uint64{1, 0, 0, 99}, 0.004},
		{"p0 skips empty buckets", 0, []uint64{0, 0, 5, 0}, 0.002},
	}
	for _, c := range cases {
		if got := Quantile(c.q, bounds, c.buckets); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: Quantile(%v) = %v, want %v", c.name, c.q, got, c.want)
		}
	}
	if got := Quantile(0.5, bounds, []uint64{0, 0, 0, 0}); !math.IsNaN(got) {
		t.Errorf("empty histogram: %v, want NaN", got)
	}
	if got := Quantile(0.5, bounds, []uint64{1, 2}); !math.IsNaN(got) {
		t.Errorf("buckets not matching the bounds: %v, want NaN", got)
	}
}

func TestSub(t *testing.T) {
	prev := OpStats{Count: 10, Bytes: 1000, Errors: 1, LatencySeconds: 1, Buckets: []uint64{4, 6, 0}}
	now := OpStats{Count: 15, Bytes: 1500, Errors: 1, LatencySeconds: 1.5, Buckets: []uint64{5, 8, 2}}
	d := now.Sub(prev)
	if d.Count != 5 || d.Bytes != 500 || d.Errors != 0 || math.Abs(d.LatencySeconds-0.5) > 1e-9 ||
		d.Buckets[0] != 1 || d.Buckets[1] != 2 || d.Buckets[2] != 2 {
		t.Fatalf("delta %+v", d)
	}
	// The counters restarted (the volume was attached again): count from zero.
	restarted := OpStats{Count: 3, Bytes: 300, LatencySeconds: 0.2, Buckets: []uint64{3, 0, 0}}
	d = restarted.Sub(prev)
	if d.Count != 3 || d.Bytes != 300 || d.Buckets[0] != 3 || math.Abs(d.LatencySeconds-0.2) > 1e-9 {
		t.Fatalf("delta after a restart %+v", d)
	}
}
