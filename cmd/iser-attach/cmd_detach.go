package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/volume"
)

func detachCommand() *cli.Command {
	return &cli.Command{
		Name:      "detach",
		Usage:     "flush, remove the device and log out (or remove a ublk device a stopped daemon left); refused while the device is in use unless --force",
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
				name := c.Args().First()
				if strings.Contains(name, "/") {
					return err
				}
				left, msg, lerr := detachLeftDevice(ctx, name, c.Bool("force"))
				if !left {
					return err
				}
				if lerr != nil {
					return lerr
				}
				fmt.Println(msg)
				return nil
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
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON (every field)"},
			&cli.BoolFlag{Name: "wide", Usage: "print every column (the default fits 100 columns)"},
		},
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
			defer cancel()
			all, err := listAll(ctx)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			}
			return writeListTable(c.App.Writer, all, c.Bool("wide"))
		},
	}
}

// listColumn is one column of list's table: its header, whether the
// default (narrow) table has it, and its cell of a status.
type listColumn struct {
	head   string
	narrow bool
	cell   func(s volume.Status) string
}

// listColumns are list's columns; the narrow ones fit a 100-column
// terminal with the cells clipped at listCellMax.
var listColumns = []listColumn{
	{"NAME", true, func(s volume.Status) string { return s.Name }},
	{"KIND", false, func(s volume.Status) string { return s.Kind }},
	{"DEVICE", true, func(s volume.Status) string { return s.Device }},
	{"PORTAL", false, func(s volume.Status) string { return s.Portal }},
	{"TARGET", false, func(s volume.Status) string { return s.Target }},
	{"LUN", true, func(s volume.Status) string { return fmt.Sprint(s.LUN) }},
	{"TRANSPORT", true, func(s volume.Status) string { return s.Transport }},
	{"FRONTEND", true, func(s volume.Status) string { return s.Frontend }},
	{"STATE", true, func(s volume.Status) string { return s.State + map[bool]string{true: ",ro"}[s.ReadOnly] }},
	{"RECOVERIES", false, func(s volume.Status) string { return fmt.Sprint(s.Recoveries) }},
	{"READS", false, func(s volume.Status) string { return fmt.Sprint(s.Counters.Reads) }},
	{"WRITES", false, func(s volume.Status) string { return fmt.Sprint(s.Counters.Writes) }},
	{"BYTES", false, func(s volume.Status) string {
		return humanBytes(int64(s.Counters.ReadBytes + s.Counters.WriteBytes))
	}},
	{"ERRORS", true, func(s volume.Status) string { return fmt.Sprint(s.Counters.Errors) }},
	{"IOPS", false, func(s volume.Status) string { return fmt.Sprintf("%.0f", s.Counters.IOPS) }},
	{"INITIATOR", false, func(s volume.Status) string { return s.Initiator }},
}

// listCellMax bounds a cell of the narrow table: longer names and devices
// keep their end ("...ce-lun1"), where they differ.
const listCellMax = 22

// writeListTable writes list's table: the narrow columns, or with wide
// every column, unclipped; then, for each volume or serve process with
// several paths, a table of its paths (writeListPaths). Its cells are
// list --json's fields.
func writeListTable(w io.Writer, all []volume.Status, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var cols []listColumn
	for _, col := range listColumns {
		if wide || col.narrow {
			cols = append(cols, col)
		}
	}
	row := make([]string, len(cols))
	for i, col := range cols {
		row[i] = col.head
	}
	fmt.Fprintln(tw, strings.Join(row, "\t"))
	for _, s := range all {
		for i, col := range cols {
			cell := col.cell(s)
			if cell == "" {
				cell = "-"
			}
			if !wide {
				cell = clipFront(cell, listCellMax)
			}
			row[i] = cell
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeListPaths(w, all, wide)
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
