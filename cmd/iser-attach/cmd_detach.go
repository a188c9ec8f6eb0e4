package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/volume"
)

func detachCommand() *cli.Command {
	return &cli.Command{
		Name:      "detach",
		Usage:     "flush, remove the device and log out; refused while the device is mounted unless --force",
		ArgsUsage: "NAME|DEVICE",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "detach even when the device is in use"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("detach: expected one NAME or DEVICE, got %d", c.NArg())
			}
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
			defer cancel()
			path, st, err := volume.Find(ctx, c.Args().First())
			if err != nil {
				return err
			}
			if !c.Bool("force") {
				if busy, where := volume.InUse(st.Device); busy {
					return fmt.Errorf("%s (%s) is in use (%s); unmount it first or use --force", st.Name, st.Device, where)
				}
			}
			resp, err := volume.Query(ctx, path, volume.Request{Op: "detach", Force: c.Bool("force")})
			if err != nil {
				return err
			}
			if !resp.OK {
				return fmt.Errorf("detach %s: %s", st.Name, resp.Error)
			}
			fmt.Printf("detached %s (%s)\n", st.Name, st.Device)
			return nil
		},
	}
}

func listCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list attached volumes and running serve processes with their sessions and I/O counters",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
			defer cancel()
			all, err := listAll(ctx)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tDEVICE\tPORTAL\tTARGET\tLUN\tTRANSPORT\tFRONTEND\tSTATE\tRECOVERIES\tREADS\tWRITES\tBYTES\tERRORS\tIOPS\tINITIATOR")
			for _, s := range all {
				k := s.Counters
				name, dev, frontend := s.Name, s.Device, s.Frontend
				if s.Kind == "serve" {
					dev, frontend = strings.Join(s.Listen, ","), "nbd-server"
					if name == "" {
						name = "(default export)"
					}
				}
				state := s.State
				if s.ReadOnly {
					state += ",ro"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%.0f\t%s\n", name, s.Kind, dev, s.Portal,
					s.Target, s.LUN, s.Transport, frontend, state, s.Recoveries, k.Reads, k.Writes,
					humanBytes(int64(k.ReadBytes+k.WriteBytes)), k.Errors, k.IOPS, s.Initiator)
			}
			return tw.Flush()
		},
	}
}

// listAll is every attached volume (kind attach) and then every serve
// process (kind serve): the sessions this host's iser-attach processes hold.
func listAll(ctx context.Context) ([]volume.Status, error) {
	all, err := volume.List(ctx)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Kind == "" {
			all[i].Kind = "attach"
		}
	}
	serves, err := volume.ListServe(ctx)
	if err != nil {
		return nil, err
	}
	return append(append([]volume.Status{}, all...), serves...), nil
}
