package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/volume"
)

// specFromVolume reads /etc/iser-attach/volumes/NAME.conf (the directory
// is ISER_ATTACH_CONFIG_DIR when set).
func specFromVolume(c *cli.Context, name string) (*attachSpec, error) {
	cfg, err := volume.LoadConfig(name)
	if err != nil {
		return nil, fmt.Errorf("--volume: %w", err)
	}
	sp := &attachSpec{Frontend: cfg.Frontend, Queues: cfg.Queues, IOScheduler: cfg.IOScheduler, NBDConnections: cfg.NBDConnections, MetricsListen: cfg.MetricsListen,
		ReadOnly: cfg.ReadOnly}
	sp.lunSpec = lunSpec{Volume: cfg.Name, Target: cfg.Target, LUN: cfg.LUN, AnyLUN: cfg.AnyLUN, Transport: cfg.Transport,
		QueueDepth: cfg.QueueDepth, LoginTimeout: cfg.LoginTimeout, ReplacementTimeout: cfg.ReplacementTimeout,
		NOPInterval: cfg.NOPInterval, NOPTimeout: cfg.NOPTimeout, CommandTimeout: cfg.CommandTimeout, NoPathTimeout: cfg.NoPathTimeout,
		AllPortals: cfg.AllPortals}
	if sp.PathSelector, err = initiator.ParsePathSelector(cfg.PathSelector); err != nil {
		return nil, fmt.Errorf("volume %s (%s): %w", name, cfg.Path, err)
	}
	for _, p := range cfg.Portals {
		if err := sp.addPortal(p); err != nil {
			return nil, fmt.Errorf("volume %s (%s): %w", name, cfg.Path, err)
		}
	}
	in := cfg.InitiatorName
	if in == "" {
		in = c.String("initiator-name")
	}
	if sp.InitiatorName, err = initiatorName(in); err != nil {
		return nil, err
	}
	if sp.CHAP, err = chapCredentials(c.App.ErrWriter, cfg.CHAPUser, cfg.CHAPSecretFile, cfg.MutualUser, cfg.MutualSecretFile, false); err != nil {
		return nil, fmt.Errorf("volume %s (%s): %w", name, cfg.Path, err)
	}
	if _, ok := frontends[sp.Frontend]; !ok {
		return nil, fmt.Errorf("volume %s (%s): frontend %q: want ublk or nbd", name, cfg.Path, sp.Frontend)
	}
	return sp, nil
}
