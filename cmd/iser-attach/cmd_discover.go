package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/discovery"
)

func discoverCommand() *cli.Command {
	return &cli.Command{
		Name:      "discover",
		Usage:     "list the targets a portal offers (SendTargets=All over iSCSI/TCP)",
		ArgsUsage: "[PORTAL]",
		Flags: append([]cli.Flag{
			&cli.StringSliceFlag{Name: "portal", Usage: "discovery portal: host, host:port, [v6]:port or host:port,TPGT (checked against the answer), as PORTAL; repeat to discover on each"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.DurationFlag{Name: "timeout", Value: 15 * time.Second, Usage: "time allowed for each portal's discovery: connect, log in, SendTargets (seconds, or a Go duration: 15s)"},
		}, authFlags()...),
		Action: func(c *cli.Context) error {
			portals, err := discoveryPortals(c.Args().Slice(), c.StringSlice("portal"))
			if err != nil {
				return usageErrorf(c, "%v", err)
			}
			if c.Duration("timeout") <= 0 {
				return usageErrorf(c, "--timeout %v: must be positive", c.Duration("timeout"))
			}
			name, err := initiatorName(c.String("initiator-name"))
			if err != nil {
				return err
			}
			creds, err := chapFromFlags(c)
			if err != nil {
				return err
			}
			ctx, cancel := timeoutContext(c, c.Duration("timeout")*time.Duration(len(portals)))
			defer cancel()
			var found [][]discovery.Target
			var errs []error
			for _, dp := range portals {
				addr := dp.addr
				pctx, pcancel := context.WithTimeout(ctx, c.Duration("timeout"))
				targets, err := discovery.SendTargets(pctx, discovery.Config{
					Portal: addr, InitiatorName: name, CHAP: creds, Logger: logger,
				})
				pcancel()
				if err != nil {
					if len(portals) > 1 {
						logger.Warn().Err(err).Str("portal", addr).Msg("portal skipped")
					}
					errs = append(errs, err)
					continue
				}
				if msg := tagMismatch(targets, dp); msg != "" {
					logger.Warn().Str("portal", addr).Int("tpgt", dp.tag).Msg(msg)
				}
				found = append(found, withDiscoveryPortal(targets, dp))
			}
			if len(errs) == len(portals) {
				return errors.Join(errs...)
			}
			targets := mergeTargets(found)
			if c.Bool("json") {
				err = printDiscoveryJSON(targets)
			} else {
				err = printDiscoveryTable(targets)
			}
			if err != nil {
				return err
			}
			if len(errs) > 0 {
				return fmt.Errorf("discovery failed on %d of %d portals: %w", len(errs), len(portals), errors.Join(errs...))
			}
			return nil
		},
	}
}

func printDiscoveryTable(targets []discovery.Target) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPORTAL\tTPGT")
	for _, t := range targets {
		for _, p := range t.Portals {
			tag := "-"
			if p.GroupTag >= 0 {
				tag = fmt.Sprint(p.GroupTag)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, p, tag)
		}
	}
	return tw.Flush()
}

type discoveredJSON struct {
	Target  string       `json:"target"`
	Portals []portalJSON `json:"portals"`
}

type portalJSON struct {
	Address  string `json:"address"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	GroupTag *int   `json:"group_tag,omitempty"`
}

func printDiscoveryJSON(targets []discovery.Target) error {
	out := make([]discoveredJSON, 0, len(targets))
	for _, t := range targets {
		d := discoveredJSON{Target: t.Name, Portals: []portalJSON{}}
		for _, p := range t.Portals {
			pj := portalJSON{Address: p.String(), Host: p.Host, Port: p.Port}
			if p.GroupTag >= 0 {
				tag := p.GroupTag
				pj.GroupTag = &tag
			}
			d.Portals = append(d.Portals, pj)
		}
		out = append(out, d)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
