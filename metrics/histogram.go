package metrics

import (
	"math"
	"time"
)

// LatencyBounds are the upper bounds of the latency histogram's buckets,
// from 10 µs (an I/O over RDMA to a RAM disk) to 30 s (an I/O that waited
// for a session to be reinstated). A last bucket takes what is slower.
var LatencyBounds = [...]time.Duration{
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond, 75 * time.Microsecond,
	100 * time.Microsecond, 150 * time.Microsecond, 200 * time.Microsecond, 300 * time.Microsecond,
	500 * time.Microsecond, 750 * time.Microsecond,
	time.Millisecond, 1500 * time.Microsecond, 2 * time.Millisecond, 3 * time.Millisecond,
	5 * time.Millisecond, 7500 * time.Microsecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
}

// numBuckets counts the buckets: one per bound and the one above them all.
const numBuckets = len(LatencyBounds) + 1

// bucketOf is the index of the bucket d falls in: the first bound at least
// d, or the last bucket. A binary search over a fixed array: no allocation.
func bucketOf(d time.Duration) int {
	lo, hi := 0, len(LatencyBounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if LatencyBounds[mid] < d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// BoundsSeconds returns LatencyBounds in seconds.
func BoundsSeconds() []float64 {
	out := make([]float64, len(LatencyBounds))
	for i, b := range LatencyBounds {
		out[i] = b.Seconds()
	}
	return out
}

// Quantile estimates the q-quantile (0 < q < 1; 0.99 for p99) of the
// latencies counted in buckets, whose upper bounds are bounds (one fewer
// than buckets: the last bucket is unbounded), in seconds. Within a bucket
// it interpolates linearly, as Prometheus's histogram_quantile does; a
// quantile in the last bucket is reported as the last bound. NaN when
// buckets count nothing.
func Quantile(q float64, bounds []float64, buckets []uint64) float64 {
	var total uint64
	for _, n := range buckets {
		total += n
	}
	if total == 0 || q < 0 || q > 1 || len(buckets) != len(bounds)+1 {
		return math.NaN()
	}
	rank := q * float64(total)
	var cum uint64
	for i, n := range buckets {
		if n == 0 || float64(cum+n) < rank {
			cum += n
			continue
		}
		if i == len(bounds) {
			return bounds[len(bounds)-1]
		}
		lower := 0.0
		if i > 0 {
			lower = bounds[i-1]
		}
		return lower + (bounds[i]-lower)*(rank-float64(cum))/float64(n)
	}
	return bounds[len(bounds)-1]
}
