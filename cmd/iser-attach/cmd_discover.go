package main

import (
	"encoding/json"
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
		ArgsUsage: "PORTAL",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.DurationFlag{Name: "timeout", Value: 15 * time.Second},
		}, authFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("discover: expected one PORTAL argument, got %d", c.NArg())
			}
			addr, err := portalAddr(c.Args().First())
			if err != nil {
				return err
			}
			name, err := initiatorName(c.String("initiator-name"))
			if err != nil {
				return err
			}
			creds, err := chapFromFlags(c)
			if err != nil {
				return err
			}
			ctx, cancel := timeoutContext(c, c.Duration("timeout"))
			defer cancel()
			targets, err := discovery.SendTargets(ctx, discovery.Config{
				Portal: addr, InitiatorName: name, CHAP: creds, Logger: logger,
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printDiscoveryJSON(targets)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TARGET\tPORTAL\tTPGT")
			for _, t := range targets {
				if len(t.Portals) == 0 {
					fmt.Fprintf(tw, "%s\t%s\t-\n", t.Name, addr)
				}
				for _, p := range t.Portals {
					tag := "-"
					if p.GroupTag >= 0 {
						tag = fmt.Sprint(p.GroupTag)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, p, tag)
				}
			}
			return tw.Flush()
		},
	}
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
