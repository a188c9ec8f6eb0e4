package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/discovery"
	"github.com/iser-attach/iser-attach/initiator"
)

// targetFlags select a LUN; used by every command that logs in to a target.
func targetFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "portal", Required: true, Usage: "target portal: host, host:port or [v6]:port (port 3260 by default)"},
		&cli.StringFlag{Name: "target", Required: true, Usage: "target IQN"},
		&cli.UintFlag{Name: "lun", Value: 0, Usage: "logical unit number (tgt numbers its backing stores from 1)"},
		&cli.StringFlag{Name: "transport", Value: "auto", Usage: "auto, iser or tcp"},
		&cli.IntFlag{Name: "queue-depth", Value: 128, Usage: "SCSI commands in flight"},
		&cli.DurationFlag{Name: "login-timeout", Value: 15 * time.Second, Usage: "time allowed for connecting and logging in"},
	}, authFlags()...)
}

// portalAddr parses a PORTAL argument into host:port.
func portalAddr(s string) (string, error) {
	p, err := discovery.ParsePortal(s)
	if err != nil {
		return "", fmt.Errorf("portal %q: %w", s, err)
	}
	return p.String(), nil
}

// openLUN logs in to --target on --portal and opens --lun.
func openLUN(ctx context.Context, c *cli.Context) (*initiator.LUN, error) {
	addr, err := portalAddr(c.String("portal"))
	if err != nil {
		return nil, err
	}
	name, err := initiatorName(c.String("initiator-name"))
	if err != nil {
		return nil, err
	}
	creds, err := chapFromFlags(c)
	if err != nil {
		return nil, err
	}
	lunNum := c.Uint("lun")
	if lunNum > 16383 {
		return nil, fmt.Errorf("--lun %d: at most 16383", lunNum)
	}
	lctx, cancel := context.WithTimeout(ctx, c.Duration("login-timeout"))
	defer cancel()
	log := logger.With().Str("target", c.String("target")).Uint("lun", lunNum).Logger()
	s, err := initiator.Connect(lctx, initiator.DialConfig{
		Transport: c.String("transport"), Addr: addr, QueueDepth: c.Int("queue-depth"), Logger: logger,
	}, initiator.SessionConfig{
		LoginConfig: initiator.LoginConfig{
			InitiatorName: name,
			TargetName:    c.String("target"),
			ISID:          initiator.NewISID(),
			CHAP:          creds,
		},
		QueueDepth: c.Int("queue-depth"),
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	log.Info().Str("portal", addr).Str("transport", s.Transport()).Msg("logged in")
	l, err := initiator.OpenLUN(lctx, s, uint16(lunNum))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%s at %s: %w", c.String("target"), addr, err)
	}
	return l, nil
}
