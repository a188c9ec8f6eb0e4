package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/csi"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/volume"
)

func csiCommand() *cli.Command {
	return &cli.Command{
		Name: "csi",
		Usage: "serve the Kubernetes CSI services for a pool of pre-carved LUNs on a unix socket: Identity, Controller " +
			"and Node (stage attaches a LUN of the pool through attach --daemon; see docs/kubernetes.md)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "endpoint", Usage: "the socket to serve: unix:///ABSOLUTE/PATH (a stale socket is removed)"},
			&cli.StringFlag{Name: "node-id", Usage: "this node's ID (Kubernetes: the node name), which NodeGetInfo reports"},
			&cli.StringFlag{Name: "pool", Usage: "the pool: a file in the volume file's syntax (portal lines, target, transport, CHAP keys) without lun; the target's disk LUNs are the pool"},
			&cli.StringFlag{Name: "state-dir", Usage: "directory of the controller's allocations (controller.json), locked while the controller runs"},
			&cli.BoolFlag{Name: "controller", Value: true, Usage: "serve the Controller service too (--controller=false: Identity and Node only, as a node plugin; the pool is not scanned)"},
			&cli.StringFlag{Name: "frontend", Usage: "the Node service's frontend: ublk or nbd", DefaultText: "ublk where the kernel has it, else nbd"},
			&cli.BoolFlag{Name: "fence", Value: true, Usage: "stage a volume read-write only while this node holds its LUN's persistent reservation, under a key from the node ID (attach --reservation-key); another node's stage is refused with FAILED_PRECONDITION"},
			&cli.BoolFlag{Name: "wipe-on-delete", Usage: "zero a volume's LUN (WRITE SAME(16), with UNMAP where the LUN reads unmapped blocks as zeros) before DeleteVolume frees it"},
		},
		Action: func(c *cli.Context) error {
			for _, f := range []string{"endpoint", "node-id", "pool", "state-dir"} {
				if c.String(f) == "" {
					return usageErrorf(c, "required flag --%s not given", f)
				}
			}
			path, err := csi.SocketPath(c.String("endpoint"))
			if err != nil {
				return usageErrorf(c, "--endpoint: %v", err)
			}
			sp, cfg, err := specFromPool(c, c.String("pool"))
			if err != nil {
				return err
			}
			if fe := c.String("frontend"); fe != "" && fe != "ublk" && fe != "nbd" {
				return usageErrorf(c, "--frontend %q: want ublk or nbd", fe)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("csi: %w", err)
			}
			ctx, stop := signalContext(c)
			defer stop()
			log := logger.With().Str("node_id", c.String("node-id")).Logger()
			na := &nodeAttacher{exe: exe, cfg: cfg, initiator: sp.InitiatorName, frontend: c.String("frontend")}
			if c.Bool("fence") {
				na.key = nodeKey(c.String("node-id"))
				log.Info().Str("key", fmt.Sprintf("0x%016x", na.key)).Msg("csi: read-write stages fence their LUN with this node's key")
			}
			node, err := csi.NewNode(c.String("node-id"), csi.NewHostOS(na), c.String("state-dir"), log)
			if err != nil {
				return err
			}
			defer node.Close()
			// Volumes staged by an earlier plugin whose daemons are gone are
			// attached again (taking their ublk devices over) before serving.
			if n := node.Recover(ctx, sp.LoginTimeout+30*time.Second); n > 0 {
				log.Warn().Int("volumes", n).Msg("csi: attached again the staged volumes whose daemons were gone")
			}
			var ctrl *csi.Controller
			if c.Bool("controller") {
				store, err := csi.OpenStore(c.String("state-dir"))
				if err != nil {
					return err
				}
				defer store.Close()
				lus, err := scanPool(ctx, sp)
				if err != nil {
					return err
				}
				if ctrl, err = csi.NewController(sp.Target, lus, store, log); err != nil {
					return err
				}
				if c.Bool("wipe-on-delete") {
					ctrl.Wipe = func(ctx context.Context, lun uint16, luid string) error { return wipeLUN(ctx, sp, lun, luid) }
				}
			}
			l, err := csi.Listen(path)
			if err != nil {
				return err
			}
			return csi.Serve(ctx, l, &csi.Identity{Version: buildVersion().Version, Controller: ctrl != nil}, ctrl, node, log)
		},
	}
}

// specFromPool reads a pool file: a volume file without lun.
func specFromPool(c *cli.Context, path string) (*lunSpec, *volume.Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--pool: %w", err)
	}
	defer f.Close()
	cfg, err := volume.ParseConfig("pool", path, f)
	if err != nil {
		var errs volume.ConfigErrors
		if errors.As(err, &errs) {
			return nil, nil, fmt.Errorf("--pool: %s", oneLine(errs))
		}
		return nil, nil, fmt.Errorf("--pool: %w", err)
	}
	if !cfg.AnyLUN {
		return nil, nil, fmt.Errorf("--pool: %s:%d: lun: a pool is every disk LUN of the target; leave lun out", path, volume.KeyLine(path, "lun"))
	}
	sp := &lunSpec{Target: cfg.Target, AnyLUN: true, Transport: cfg.Transport, QueueDepth: cfg.QueueDepth,
		LoginTimeout: cfg.LoginTimeout, ReplacementTimeout: cfg.ReplacementTimeout, NOPInterval: cfg.NOPInterval,
		NOPTimeout: cfg.NOPTimeout, CommandTimeout: cfg.CommandTimeout, NoPathTimeout: cfg.NoPathTimeout}
	for _, p := range cfg.Portals {
		if err := sp.addPortal(p); err != nil {
			return nil, nil, fmt.Errorf("--pool %s: %w", path, err)
		}
	}
	in := cfg.InitiatorName
	if in == "" {
		in = c.String("initiator-name")
	}
	if sp.InitiatorName, err = initiatorName(in); err != nil {
		return nil, nil, err
	}
	if sp.CHAP, err = chapCredentials(c.App.ErrWriter, cfg.CHAPUser, cfg.CHAPSecretFile, cfg.MutualUser, cfg.MutualSecretFile, false); err != nil {
		return nil, nil, fmt.Errorf("--pool %s: %w", path, err)
	}
	return sp, cfg, nil
}

// scanPool logs in to the pool's target and describes its LUNs (REPORT
// LUNS, INQUIRY, READ CAPACITY, VPD 0x83): every disk that answers is
// in the pool.
func scanPool(ctx context.Context, sp *lunSpec) ([]csi.LU, error) {
	lctx, cancel := context.WithTimeout(ctx, sp.LoginTimeout*time.Duration(len(sp.Portals))+30*time.Second)
	defer cancel()
	nx, log, err := loginSpec(lctx, sp)
	if err != nil {
		if initiator.LoginRefused(err) {
			return nil, &refusedError{err: fmt.Errorf("scan pool: %w", err)}
		}
		return nil, fmt.Errorf("scan pool: %w", err)
	}
	defer nx.Close()
	all, err := initiator.DescribeLUNs(lctx, nx)
	if err != nil {
		return nil, fmt.Errorf("scan pool %s at %s: %w", sp.Target, nx.Status().Portal, err)
	}
	var lus []csi.LU
	for _, d := range all {
		switch {
		case !d.Disk():
			continue
		case d.Err != nil:
			log.Warn().Uint16("lun", d.Number).Err(d.Err).Msg("LUN left out of the pool")
			continue
		}
		lus = append(lus, csi.LU{LUN: d.Number, Size: d.Info.Size(), BlockSize: d.Info.BlockSize, LUID: d.Info.WWN})
	}
	return lus, nil
}

// wipeLUN logs in to the pool's target, checks that LUN lun is still the
// LU luid, and zeroes it (WriteZeroes: WRITE SAME(16), with the UNMAP bit
// where the LUN reads unmapped blocks as zeros, else zero-filled writes),
// then flushes.
func wipeLUN(ctx context.Context, sp *lunSpec, lun uint16, luid string) error {
	lctx, cancel := initiator.LoginContext(ctx, sp.LoginTimeout*time.Duration(len(sp.Portals)))
	defer cancel()
	nx, log, err := loginSpec(lctx, sp)
	if err != nil {
		return err
	}
	defer nx.Close()
	l, err := initiator.OpenLUN(lctx, nx, lun)
	if err != nil {
		return fmt.Errorf("open LUN %d: %w", lun, err)
	}
	if got := l.Info().WWN; got != luid {
		return fmt.Errorf("LUN %d is now %s, not %s: not wiped", lun, got, luid)
	}
	start := time.Now()
	if err := l.WriteZeroes(ctx, 0, l.Size(), true, true); err != nil {
		return fmt.Errorf("zero LUN %d: %w", lun, err)
	}
	log.Info().Uint16("lun", lun).Int64("bytes", l.Size()).Dur("took", time.Since(start)).Msg("LUN zeroed")
	return nil
}
