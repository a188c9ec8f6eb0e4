package main

import (
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
)

// workload is one table row: which file, which figure.
type workload struct {
	file  string // DIR/{a,b}-FILE.json
	title string
	unit  string
	value func(fioJob) (v, p99ms float64)
}

var workloads = []workload{
	{"randread", "4k randread QD32", "IOPS", func(j fioJob) (float64, float64) { return j.Read.IOPS, p99(j.Read) }},
	{"randwrite", "4k randwrite QD32", "IOPS", func(j fioJob) (float64, float64) { return j.Write.IOPS, p99(j.Write) }},
	{"seqread", "1M seqread QD8", "MB/s", func(j fioJob) (float64, float64) { return j.Read.BWBytes / 1e6, p99(j.Read) }},
}

func p99(d fioDir) float64 { return d.ClatNS.Percentile["99.000000"] / 1e6 }

type cell struct {
	ok       bool
	v, p99ms float64
}

// writeTable prints the table and returns the first error met; rows whose
// files are missing or broken show "-".
func writeTable(w io.Writer, dir, labelA, labelB string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\tunit\t%s\t%s\ta/b\t%s p99 ms\t%s p99 ms\t\n", labelA, labelB, labelA, labelB)
	var firstErr error
	for _, wl := range workloads {
		var cells [2]cell
		for i, side := range []string{"a", "b"} {
			j, ok, err := readFio(filepath.Join(dir, side+"-"+wl.file+".json"))
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if ok {
				v, p := wl.value(j)
				cells[i] = cell{true, v, p}
			}
		}
		ratio := "-"
		if cells[0].ok && cells[1].ok && cells[1].v > 0 {
			ratio = fmt.Sprintf("%.2f", cells[0].v/cells[1].v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", wl.title, wl.unit,
			num(cells[0], false), num(cells[1], false), ratio, num(cells[0], true), num(cells[1], true))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return firstErr
}

func num(c cell, lat bool) string {
	switch {
	case !c.ok:
		return "-"
	case lat:
		return fmt.Sprintf("%.2f", c.p99ms)
	default:
		return fmt.Sprintf("%.1f", c.v)
	}
}
