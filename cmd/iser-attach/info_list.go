package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
)

// listLUNs is info without --lun: every LUN the target reports (REPORT
// LUNS, then INQUIRY and, for disks, READ CAPACITY and the VPD pages), as a
// table or as a JSON array of info --json objects.
func listLUNs(ctx context.Context, sp *lunSpec, asJSON bool) error {
	lctx, cancel := initiator.LoginContext(ctx, sp.LoginTimeout*time.Duration(len(sp.Portals)))
	defer cancel()
	nx, _, err := loginSpec(lctx, sp)
	if err != nil {
		return err
	}
	defer nx.Close()
	all, err := initiator.DescribeLUNs(ctx, nx)
	if err != nil {
		return fmt.Errorf("%s at %s: %w", sp.Target, nx.Status().Portal, err)
	}
	out := make([]lunInfoJSON, 0, len(all))
	for _, d := range all {
		j := infoJSON(nx, sp.InitiatorName, d.DeviceType, d.Info, d.MaxTransfer)
		if !d.Connected {
			j.Type = "not connected " + j.Type
		}
		if d.Err != nil {
			j.Error = d.Err.Error()
		}
		out = append(out, j)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	st := nx.Status()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "target\t%s\n", nx.TargetName())
	fmt.Fprintf(tw, "portal\t%s\n", st.Portal)
	fmt.Fprintf(tw, "transport\t%s\n", st.Transport)
	fmt.Fprintf(tw, "initiator\t%s\n", sp.InitiatorName)
	if err := tw.Flush(); err != nil {
		return err
	}
	if m, ok := nx.(*initiator.Multipath); ok {
		if err := writeInfoPaths(os.Stdout, pathStatuses(m.Paths())); err != nil {
			return err
		}
	}
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LUN\tTYPE\tSIZE\tBLOCK\tVENDOR\tPRODUCT\tWWN")
	for _, j := range out {
		size, block := "-", "-"
		if j.Size > 0 {
			size, block = humanBytes(j.Size), fmt.Sprint(j.BlockSize)
		}
		if j.Error != "" {
			size = "error: " + j.Error
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.LUN, j.Type, size, block, dash(j.Vendor), dash(j.Product), dash(j.WWN))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
