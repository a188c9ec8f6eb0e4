package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/rdma"
)

// rdmaCommand groups RDMA device helpers: soft-RoCE setup and listing.
func rdmaCommand() *cli.Command {
	return &cli.Command{
		Name:  "rdma",
		Usage: "list RDMA devices, set up soft-RoCE (rdma_rxe)",
		Subcommands: []*cli.Command{
			{
				Name:      "setup",
				Usage:     "create a soft-RoCE device on a network interface (like: rdma link add rxe0 type rxe netdev NAME)",
				ArgsUsage: " ",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "netdev", Required: true, Usage: "network interface to bind the soft-RoCE device to"},
					&cli.StringFlag{Name: "name", Value: "rxe0", Usage: "name of the new RDMA device"},
				},
				Action: rdmaSetup,
			},
			{
				Name:      "list",
				Usage:     "list RDMA device ports: state, netdev, node GUID (by RDMA netlink)",
				ArgsUsage: " ",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action:    rdmaList,
			},
		},
	}
}

func rdmaSetup(c *cli.Context) error {
	name, netdev := c.String("name"), c.String("netdev")
	if err := rdma.AddSoftRoCE(name, netdev); err != nil {
		return fmt.Errorf("rdma setup: %w", err)
	}
	links, err := rdma.Links()
	if err != nil {
		return fmt.Errorf("rdma setup: %w", err)
	}
	for _, l := range links {
		if l.Device == name {
			fmt.Fprintf(c.App.Writer, "%s port %d on %s: %s\n", l.Device, l.Port, l.NetDev, l.State)
			return nil
		}
	}
	return fmt.Errorf("rdma setup: %s was added but is not listed: %w", name, rdma.ErrNoDevice)
}

func rdmaList(c *cli.Context) error {
	links, err := rdma.Links()
	if err != nil {
		return fmt.Errorf("rdma list: %w", err)
	}
	lib := "ok"
	if err := rdma.Supported(); err != nil {
		lib = err.Error()
		if errors.Is(err, rdma.ErrNotSupported) {
			lib = "not built in (CGO_ENABLED=0)"
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			RDMACore string      `json:"rdma_core"`
			Links    []rdma.Link `json:"links"`
		}{lib, links})
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tPORT\tSTATE\tPHYSICAL\tNETDEV\tNODE GUID")
	for _, l := range links {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", l.Device, l.Port, l.State, l.PhysState, l.NetDev, l.NodeGUID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(links) == 0 {
		fmt.Fprintln(c.App.Writer, "no RDMA devices (try: iser-attach rdma setup --netdev NAME)")
	}
	fmt.Fprintf(c.App.Writer, "rdma-core: %s\n", lib)
	return nil
}
