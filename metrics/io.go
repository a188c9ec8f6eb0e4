package metrics

import (
	"sync/atomic"
	"time"
)

// Op is a kind of block I/O.
type Op int

// The operations counted, in the order of Ops.
const (
	OpRead Op = iota
	OpWrite
	OpFlush
	OpDiscard
	OpWriteZeroes
	numOps
)

// Ops are every Op, in order.
var Ops = [numOps]Op{OpRead, OpWrite, OpFlush, OpDiscard, OpWriteZeroes}

var opNames = [numOps]string{"read", "write", "flush", "discard", "write_zeroes"}

// String is the op label value: read, write, flush, discard, write_zeroes.
func (o Op) String() string {
	if o < 0 || o >= numOps {
		return "unknown"
	}
	return opNames[o]
}

// opCounters are one Op's totals. The count of completed I/Os is the sum of
// the buckets, so a histogram and its count can never disagree.
type opCounters struct {
	bytes, errors, sumNanos atomic.Uint64
	buckets                 [numBuckets]atomic.Uint64
	_                       [64]byte // keep the ops' hot counters on separate cache lines
}

// IO counts one volume's I/O. Its methods are safe for concurrent use and
// neither lock nor allocate. The zero value is ready.
type IO struct {
	inflight atomic.Int64
	_        [56]byte
	ops      [numOps]opCounters
}

// Begin marks an I/O as started and returns its start time for End.
func (m *IO) Begin() time.Time {
	m.inflight.Add(1)
	return time.Now()
}

// End records the I/O begun at start: op, the bytes it moved and whether it
// failed.
func (m *IO) End(op Op, bytes int, start time.Time, err error) {
	d := time.Since(start)
	m.inflight.Add(-1)
	c := &m.ops[op]
	if err != nil {
		c.errors.Add(1)
	}
	c.bytes.Add(uint64(bytes))
	c.sumNanos.Add(uint64(max(d, 0)))
	c.buckets[bucketOf(d)].Add(1)
}

// Inflight is the number of I/Os begun and not ended.
func (m *IO) Inflight() int64 { return m.inflight.Load() }

// Completed is the number of I/Os ended, of every op, read without
// allocating (a sampler that ticks while I/O runs calls it).
func (m *IO) Completed() uint64 {
	var n uint64
	for op := range m.ops {
		for i := range m.ops[op].buckets {
			n += m.ops[op].buckets[i].Load()
		}
	}
	return n
}

// OpStats are one Op's totals at a point in time.
type OpStats struct {
	Count  uint64 `json:"count"`
	Bytes  uint64 `json:"bytes"`
	Errors uint64 `json:"errors"`
	// LatencySeconds is the sum of every I/O's latency.
	LatencySeconds float64 `json:"latency_seconds"`
	// Buckets counts I/Os per latency bucket (not cumulative): Buckets[i]
	// took at most Snapshot.BoundsSeconds[i] and more than the bound
	// before it; the last one took longer than the last bound.
	Buckets []uint64 `json:"buckets"`
}

// Snapshot is an IO's totals at a point in time: what the control
// socket's stats request returns.
type Snapshot struct {
	Inflight int64 `json:"inflight"`
	// BoundsSeconds are the latency buckets' upper bounds (LatencyBounds).
	BoundsSeconds []float64 `json:"bounds_seconds"`
	// Ops maps an op's name (Op.String) to its totals.
	Ops map[string]OpStats `json:"ops"`
}

// Snapshot reads the counters. Each one is read atomically; they are not
// read at one instant, so a concurrent I/O may show in one and not yet in
// another.
func (m *IO) Snapshot() Snapshot {
	s := Snapshot{Inflight: m.inflight.Load(), BoundsSeconds: BoundsSeconds(), Ops: make(map[string]OpStats, numOps)}
	for _, op := range Ops {
		c := &m.ops[op]
		st := OpStats{Bytes: c.bytes.Load(), Errors: c.errors.Load(),
			LatencySeconds: time.Duration(c.sumNanos.Load()).Seconds(), Buckets: make([]uint64, numBuckets)}
		for i := range c.buckets {
			st.Buckets[i] = c.buckets[i].Load()
			st.Count += st.Buckets[i]
		}
		s.Ops[op.String()] = st
	}
	return s
}

// Op returns the totals of op (zero when the snapshot lacks it).
func (s Snapshot) Op(op Op) OpStats { return s.Ops[op.String()] }

// Sub is s minus an earlier snapshot prev of the same counters: what
// happened in between. A counter smaller than before (the volume was
// attached again) counts from zero.
func (s OpStats) Sub(prev OpStats) OpStats {
	d := func(now, then uint64) uint64 {
		if now < then {
			return now
		}
		return now - then
	}
	out := OpStats{Count: d(s.Count, prev.Count), Bytes: d(s.Bytes, prev.Bytes), Errors: d(s.Errors, prev.Errors),
		LatencySeconds: s.LatencySeconds - prev.LatencySeconds, Buckets: make([]uint64, len(s.Buckets))}
	if s.Count < prev.Count || out.LatencySeconds < 0 {
		out.LatencySeconds = s.LatencySeconds
	}
	for i := range s.Buckets {
		var p uint64
		if i < len(prev.Buckets) && s.Count >= prev.Count {
			p = prev.Buckets[i]
		}
		out.Buckets[i] = d(s.Buckets[i], p)
	}
	return out
}
