package volume

import (
	"context"
	"errors"
	"fmt"

	"github.com/iser-attach/iser-attach/metrics"
)

// Stats answers the control socket's "stats" request: a volume's I/O
// counters and latency histogram at a point in time. `iser-attach stats`
// turns two of them into rates and percentiles.
type Stats struct {
	Name   string `json:"name"`
	Device string `json:"device"`
	// TimeNanos is when IO was read, in Unix nanoseconds (the server's
	// clock): rates divide by the difference of two.
	TimeNanos int64            `json:"time_ns"`
	IO        metrics.Snapshot `json:"io"`
}

// StatsReporter is a Controller that answers "stats" requests.
type StatsReporter interface {
	Stats() Stats
}

// errNoStats answers "stats" on a control socket whose volume does not
// count I/O.
var errNoStats = errors.New("this volume does not report stats")

// stats answers a "stats" request for c.
func stats(c Controller) (*Stats, error) {
	sr, ok := c.(StatsReporter)
	if !ok {
		return nil, errNoStats
	}
	st := sr.Stats()
	return &st, nil
}

// QueryStats asks the control socket at path for its volume's Stats.
func QueryStats(ctx context.Context, path string) (Stats, error) {
	resp, err := Query(ctx, path, Request{Op: "stats"})
	if err != nil {
		return Stats{}, err
	}
	if !resp.OK || resp.Stats == nil {
		msg := resp.Error
		if msg == "" {
			msg = "no stats in the answer"
		}
		return Stats{}, fmt.Errorf("stats from %s: %s", path, msg)
	}
	return *resp.Stats, nil
}
