package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/metrics"
	"github.com/iser-attach/iser-attach/volume"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "print the IOPS, throughput and latency percentiles of attached volumes and serve processes every interval, like iostat",
		ArgsUsage: "[NAME|DEVICE]",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "time between reports (seconds, or a Go duration: 500ms)"},
			&cli.IntFlag{Name: "count", Usage: "stop after N reports (0: until interrupted)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usageErrorf(c, "expected at most one NAME or DEVICE, got %d arguments", c.NArg())
			}
			interval, count := c.Duration("interval"), c.Int("count")
			if interval <= 0 || count < 0 {
				return usageErrorf(c, "--interval must be positive and --count not negative")
			}
			ctx, stop := signalContext(c)
			defer stop()
			err := runStats(ctx, c.App.Writer, c.Args().First(), interval, count)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
}

// runStats samples the volume name (every attached volume when empty) and
// writes a report of the deltas after each interval, count times (0: until
// ctx ends).
func runStats(ctx context.Context, w io.Writer, name string, interval time.Duration, count int) error {
	prev, err := sampleStats(ctx, name)
	if err != nil {
		return err
	}
	if len(prev) == 0 {
		return errors.New("stats: no attached volumes and no serve processes")
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; count == 0 || n < count; n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		cur, err := sampleStats(ctx, name)
		if err != nil {
			return err
		}
		if err := writeStatsReport(w, prev, cur); err != nil {
			return err
		}
		prev = cur
	}
	return nil
}

// sampleStats asks the volume or serve process name (its export's one
// name, as list shows it), or every attached volume and serve process, for
// its stats. One that went away between listing and asking is left out.
func sampleStats(ctx context.Context, name string) ([]volume.Stats, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	serves, err := volume.ListServe(qctx)
	if err != nil {
		return nil, err
	}
	if name != "" {
		path, _, err := volume.Find(qctx, name)
		if err != nil {
			for _, s := range serves {
				if s.Name == name || s.Device == name {
					path, err = volume.ServeSocketPath(s.PID), nil
					break
				}
			}
		}
		if err != nil {
			return nil, err
		}
		st, err := volume.QueryStats(qctx, path)
		if err != nil {
			return nil, err
		}
		return []volume.Stats{st}, nil
	}
	all, err := volume.List(qctx)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, s := range all {
		paths = append(paths, volume.SocketPath(s.Name))
	}
	for _, s := range serves {
		paths = append(paths, volume.ServeSocketPath(s.PID))
	}
	var out []volume.Stats
	for _, p := range paths {
		if st, err := volume.QueryStats(qctx, p); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// writeStatsReport writes one report: per volume present in both samples,
// the rates between them and the latency percentiles of the I/Os completed
// in between.
func writeStatsReport(w io.Writer, prev, cur []volume.Stats) error {
	before := map[string]volume.Stats{}
	for _, s := range prev {
		before[s.Name] = s
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tr/s\tw/s\trMiB/s\twMiB/s\tr_p50_ms\tr_p99_ms\tw_p50_ms\tw_p99_ms\tother/s\terr/s\tinflight\t\n",
		time.Now().Format("15:04:05"))
	for _, s := range cur {
		p, ok := before[s.Name]
		if !ok {
			continue // attached since the last sample: it shows next time
		}
		secs := float64(s.TimeNanos-p.TimeNanos) / 1e9
		if secs <= 0 {
			continue
		}
		d := func(op metrics.Op) metrics.OpStats { return s.IO.Op(op).Sub(p.IO.Op(op)) }
		r, wr := d(metrics.OpRead), d(metrics.OpWrite)
		other := d(metrics.OpFlush).Count + d(metrics.OpDiscard).Count + d(metrics.OpWriteZeroes).Count
		var errs uint64
		for _, op := range metrics.Ops {
			errs += d(op).Errors
		}
		q := func(o metrics.OpStats, q float64) string {
			v := metrics.Quantile(q, s.IO.BoundsSeconds, o.Buckets)
			if math.IsNaN(v) {
				return "-"
			}
			return fmt.Sprintf("%.3f", v*1000)
		}
		rate := func(n uint64) string { return fmt.Sprintf("%.0f", float64(n)/secs) }
		mib := func(n uint64) string { return fmt.Sprintf("%.2f", float64(n)/secs/(1<<20)) }
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", s.Name, rate(r.Count), rate(wr.Count),
			mib(r.Bytes), mib(wr.Bytes), q(r, 0.5), q(r, 0.99), q(wr, 0.5), q(wr, 0.99), rate(other), rate(errs), s.IO.Inflight)
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}
