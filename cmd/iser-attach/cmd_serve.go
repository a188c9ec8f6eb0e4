package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/nbd"
	"github.com/iser-attach/iser-attach/volume"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "log in and serve a LUN as an NBD export (for qemu, nbdcopy, fio, nbd-client)",
		Flags: append(targetFlags(),
			&cli.StringSliceFlag{Name: "listen", Required: true, Usage: "unix:PATH or tcp:HOST:PORT (repeatable)"},
			&cli.StringFlag{Name: "export-name", Value: "", Usage: "NBD export name (default: the empty default export)"},
			&cli.IntFlag{Name: "max-in-flight", Value: 128, Usage: "NBD requests in flight per connection"},
			metricsListenFlag(),
		),
		Action: func(c *cli.Context) error {
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
			defer l.Close()
			info := l.Info()
			counting := volume.NewCounting(l.LUN)
			defer counting.Close()
			me.add(exportMetricsName(c.String("export-name"), l), l, counting.IO())
			srv, err := nbd.NewServer([]nbd.Export{{
				Name:        c.String("export-name"),
				Description: fmt.Sprintf("%s lun %d (%s %s)", l.nx.TargetName(), info.Number, info.Vendor, info.Product),
				Backend:     counting,
			}}, nbd.Options{MaxInFlight: c.Int("max-in-flight"), Logger: logger})
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
				logger.Info().Str("listen", spec).Int64("size", info.Size()).Uint32("block_size", info.BlockSize).Msg("serving NBD")
				go func() { errc <- srv.Serve(ctx, ln) }()
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
			// Flush the target's cache before logging out: acknowledged
			// writes must be stable once we are gone.
			if err := l.Flush(sctx); err != nil {
				logger.Warn().Err(err).Msg("final SYNCHRONIZE CACHE")
			}
			return l.Close()
		},
	}
}
