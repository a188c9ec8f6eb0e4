package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/nbd"
	"github.com/iser-attach/iser-attach/volume"
)

// finalFlushTimeout bounds the SYNCHRONIZE CACHE serve sends before it logs
// out, whatever ended serving (a signal cancels the command's context, so
// the flush has a context of its own).
const finalFlushTimeout = 30 * time.Second

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "log in and serve a LUN as an NBD export (for qemu, nbdcopy, fio, nbd-client)",
		Flags: append(append(targetFlags(), sessionFlags()...),
			&cli.BoolFlag{Name: "all-portals", Usage: "also log in through every other portal SendTargets lists for the target (a path each)"},
			&cli.StringSliceFlag{Name: "listen", Required: true, Usage: "unix:PATH or tcp:HOST:PORT (repeatable); TCP on a non-loopback address needs --allow-remote"},
			&cli.BoolFlag{Name: "allow-remote", Usage: "allow --listen on addresses other hosts can reach (NBD has no authentication: anyone who connects can read and write the LUN)"},
			&cli.StringFlag{Name: "export-name", Value: "", Usage: "NBD export name (default: the empty default export)"},
			&cli.IntFlag{Name: "max-in-flight", Value: 128, Usage: "NBD requests in flight per connection"},
			&cli.IntFlag{Name: "max-connections", Value: 64, Usage: "NBD connections served at once; more are closed at once"},
			&cli.IntFlag{Name: "max-in-flight-mib", Value: 64, Usage: "MiB of request payloads held at once over all connections (at least 32)"},
			metricsListenFlag(),
			readOnlyFlag(),
		),
		Action: func(c *cli.Context) error {
			if err := checkListen(c.StringSlice("listen"), c.Bool("allow-remote")); err != nil {
				return usageErrorf(c, "%v", err)
			}
			if c.Int("max-connections") < 1 || c.Int("max-in-flight") < 1 || c.Int("max-in-flight-mib") < 32 {
				return usageErrorf(c, "--max-connections and --max-in-flight must be at least 1, --max-in-flight-mib at least 32")
			}
			if err := checkListenSpec(c, "metrics-listen", c.String("metrics-listen")); err != nil {
				return err
			}
			ctx, stop := signalContext(c)
			defer stop()
			me, err := listenMetrics(c.String("metrics-listen"))
			if err != nil {
				return err
			}
			defer me.Close()
			l, err := openLUNFromFlags(ctx, c)
			if err != nil {
				return err
			}
			counting := counting.New(l.LUN)
			counting.OnError = newIOErrorLog(logger).report
			defer counting.Close()
			me.add(exportMetricsName(c.String("export-name"), l), l, counting.IO()) // the name list and stats show
			return endServe(l, serveLUN(ctx, c, l, counting))
		},
	}
}

// checkListen refuses listener specs other hosts can reach unless allowed:
// NBD has no authentication.
func checkListen(specs []string, allowRemote bool) error {
	for _, spec := range specs {
		local, err := nbd.Loopback(spec)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		if !local && !allowRemote {
			return fmt.Errorf("--listen %s is reachable from other hosts and NBD has no authentication: listen on a loopback address or unix:, or pass --allow-remote", spec)
		}
	}
	return nil
}

// serveLUN serves l, through counting (l.LUN counted), over NBD until ctx
// ends (nil) or serving fails. While it serves, a control socket answers
// status requests (iser-attach list).
func serveLUN(ctx context.Context, c *cli.Context, l *lunConn, counting *counting.Backend) error {
	info := l.Info()
	srv, err := nbd.NewServer([]nbd.Export{{
		Name:        c.String("export-name"),
		Description: fmt.Sprintf("%s lun %d (%s %s)", l.nx.TargetName(), info.Number, info.Vendor, info.Product),
		Backend:     counting,
		ReadOnly:    c.Bool("read-only"),
	}}, nbd.Options{
		MaxInFlight:      c.Int("max-in-flight"),
		MaxConns:         c.Int("max-connections"),
		MaxInFlightBytes: int64(c.Int("max-in-flight-mib")) << 20,
		Logger:           logger,
	})
	if err != nil {
		return err
	}
	errc := make(chan error, len(c.StringSlice("listen")))
	for _, spec := range c.StringSlice("listen") {
		ln, err := nbd.Listen(spec)
		if err != nil {
			srv.Close()
			return err
		}
		logger.Info().Str("listen", spec).Int64("size", info.Size()).Uint32("block_size", info.BlockSize).
			Bool("read_only", c.Bool("read-only") || info.WriteProtected).Msg("serving NBD")
		go func() { errc <- srv.Serve(ctx, ln) }()
	}
	export := c.String("export-name")
	sc := &serveControl{l: l, counting: counting, st: volume.Status{Kind: "serve", Name: exportMetricsName(export, l),
		Export: &export, Listen: c.StringSlice("listen"), Device: strings.Join(c.StringSlice("listen"), ","),
		Frontend: "nbd-server", Target: l.nx.TargetName(), LUN: info.Number, WWN: info.WWN,
		Initiator: l.nx.InitiatorName(), ReadOnly: c.Bool("read-only") || info.WriteProtected,
		PID: os.Getpid(), Since: time.Now().UTC().Format(time.RFC3339)}}
	if ctl, err := volume.ListenServeControl(sc); err != nil {
		logger.Warn().Err(err).Msg("no control socket: iser-attach list will not show this process")
	} else {
		defer ctl.Close()
	}
	select {
	case <-ctx.Done():
		logger.Info().Msg("shutting down")
	case err := <-errc:
		if err != nil && !errors.Is(err, context.Canceled) {
			srv.Close()
			return fmt.Errorf("serve: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn().Err(err).Msg("NBD shutdown")
	}
	return nil
}

// endServe flushes the target's cache and logs out, whatever ended serving
// (serr): writes the NBD clients saw acknowledged must be stable once we
// are gone. The flush has its own timeout, independent of the command's
// context, which a signal may have cancelled. It returns serr, else the
// flush's error (acknowledged writes may be lost), else the logout's.
func endServe(l *lunConn, serr error) error {
	fctx, cancel := context.WithTimeout(context.Background(), finalFlushTimeout)
	defer cancel()
	ferr := l.Flush(fctx)
	if ferr != nil {
		logger.Warn().Err(ferr).Msg("final SYNCHRONIZE CACHE")
		ferr = fmt.Errorf("serve: final SYNCHRONIZE CACHE: %w", ferr)
	}
	if ferr == nil {
		if err := l.unfence(fctx); err != nil {
			logger.Warn().Err(err).Msg("release the reservation")
			ferr = fmt.Errorf("serve: release the reservation: %w", err)
		}
	}
	cerr := l.Close()
	if cerr != nil {
		cerr = fmt.Errorf("serve: logout: %w", cerr)
	}
	switch {
	case serr != nil:
		return serr
	case ferr != nil:
		return ferr
	}
	return cerr
}

// serveControl answers a serve process's control socket.
type serveControl struct {
	l        *lunConn
	counting *counting.Backend
	st       volume.Status // the fixed fields
}

// Status reports the session and the I/O counters; State is serving,
// recovering or failed.
func (s *serveControl) Status() volume.Status {
	st := s.st
	ns := s.l.nx.Status()
	st.State = nexusState(ns.State, "serving")
	setNexusFields(&st, ns)
	setPaths(&st, s.l)
	st.Counters = s.counting.Counters()
	return st
}

// Detach is refused: a serve process ends on SIGINT or SIGTERM.
func (s *serveControl) Detach(context.Context, bool) error {
	return fmt.Errorf("serve (pid %d) is not an attached volume: stop it with kill %d (SIGTERM)", s.st.PID, s.st.PID)
}

// Stats answers the control socket's stats requests, as an attached
// volume does.
func (s *serveControl) Stats() volume.Stats {
	return volume.Stats{Name: s.st.Name, Device: s.st.Device, TimeNanos: time.Now().UnixNano(),
		IO: s.counting.Snapshot()}
}

// A serve process answers stats requests too.
var _ volume.StatsReporter = (*serveControl)(nil)
