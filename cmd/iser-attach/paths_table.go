package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/volume"
)

// pathStatuses is a multipath LUN's paths as list --json and info --json
// show them.
func pathStatuses(ps []initiator.PathStatus) []volume.PathStatus {
	var out []volume.PathStatus
	for _, p := range ps {
		out = append(out, volume.PathStatus{Portal: p.Portal, State: p.State.String(), ALUA: p.ALUA,
			IOs: p.IOs, InFlight: p.InFlight, Failovers: p.Failovers, LastError: p.LastError})
	}
	return out
}

// pathColumn is one column of a path table: its header (the JSON field's
// name in capitals), whether the narrow table has it, and its cell.
type pathColumn struct {
	head   string
	narrow bool
	cell   func(p volume.PathStatus) string
}

var pathColumns = []pathColumn{
	{"PORTAL", true, func(p volume.PathStatus) string { return p.Portal }},
	{"STATE", true, func(p volume.PathStatus) string { return p.State }},
	{"ALUA", true, func(p volume.PathStatus) string { return p.ALUA }},
	{"IOS", true, func(p volume.PathStatus) string { return fmt.Sprint(p.IOs) }},
	{"IN_FLIGHT", true, func(p volume.PathStatus) string { return fmt.Sprint(p.InFlight) }},
	{"FAILOVERS", false, func(p volume.PathStatus) string { return fmt.Sprint(p.Failovers) }},
	{"LAST_ERROR", true, func(p volume.PathStatus) string { return p.LastError }},
}

// listWidth is what list's narrow tables fit; minErrorCell is the least
// of a path's last error they show ("...reset by peer").
const (
	listWidth    = 100
	minErrorCell = 16
)

// writePathTable writes one table of paths, each line after indent. With
// wide every column, unclipped; otherwise the narrow columns, the portal
// clipped at listCellMax and the last error (its end: the cause) to what
// the line has left of listWidth, but never below minErrorCell (the
// widest cells, an IPv6 portal, a ten-digit count and
// active/non-optimized in one table, can push a line past listWidth).
func writePathTable(w io.Writer, indent string, paths []volume.PathStatus, wide bool) error {
	var cols []pathColumn
	for _, col := range pathColumns {
		if wide || col.narrow {
			cols = append(cols, col)
		}
	}
	rows := [][]string{make([]string, len(cols))}
	for i, col := range cols {
		rows[0][i] = col.head
	}
	for _, p := range paths {
		row := make([]string, len(cols))
		for i, col := range cols {
			row[i] = col.cell(p)
			if row[i] == "" {
				row[i] = "-"
			}
			if !wide && col.head == "PORTAL" {
				row[i] = clipFront(row[i], listCellMax)
			}
		}
		rows = append(rows, row)
	}
	if !wide {
		used := len(indent)
		for i := range len(cols) - 1 {
			n := 0
			for _, row := range rows {
				n = max(n, len(row[i]))
			}
			used += n + 2
		}
		room := max(listWidth-used, minErrorCell)
		for _, row := range rows[1:] {
			row[len(cols)-1] = clipFront(row[len(cols)-1], room)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, indent+strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// clipFront keeps the end of s within n bytes ("...ce-lun1").
func clipFront(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n+3:]
}

// writeListPaths writes, after list's table, each multipath entry's paths:
// a line naming it (clipped as in the table above unless wide), then its
// path table, indented.
func writeListPaths(w io.Writer, all []volume.Status, wide bool) error {
	for _, s := range all {
		if len(s.Paths) == 0 {
			continue
		}
		name := s.Name
		if !wide {
			name = clipFront(name, listCellMax)
		}
		fmt.Fprintf(w, "\n%s: %d paths\n", name, len(s.Paths))
		if err := writePathTable(w, "  ", s.Paths, wide); err != nil {
			return err
		}
	}
	return nil
}
