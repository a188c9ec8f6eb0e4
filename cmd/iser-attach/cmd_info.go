package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:  "info",
		Usage: "log in and describe a LUN: size, block size, vendor, product, WWN, write cache, thin provisioning",
		Flags: append(targetFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			ctx, cancel := timeoutContext(c, c.Duration("login-timeout")+15*time.Second)
			defer cancel()
			l, err := openLUNFromFlags(ctx, c)
			if err != nil {
				return err
			}
			defer l.Close()
			info := lunJSON(l)
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "target\t%s\n", info.Target)
			fmt.Fprintf(tw, "portal\t%s\n", info.Portal)
			fmt.Fprintf(tw, "transport\t%s\n", info.Transport)
			fmt.Fprintf(tw, "lun\t%d\n", info.LUN)
			fmt.Fprintf(tw, "size\t%d bytes (%s)\n", info.Size, humanBytes(info.Size))
			fmt.Fprintf(tw, "logical block size\t%d\n", info.BlockSize)
			fmt.Fprintf(tw, "physical block size\t%d\n", info.PhysicalBlockSize)
			fmt.Fprintf(tw, "vendor\t%s\n", info.Vendor)
			fmt.Fprintf(tw, "product\t%s\n", info.Product)
			fmt.Fprintf(tw, "revision\t%s\n", info.Revision)
			fmt.Fprintf(tw, "serial\t%s\n", info.Serial)
			fmt.Fprintf(tw, "wwn\t%s\n", info.WWN)
			fmt.Fprintf(tw, "write cache\t%s\n", onOff(info.WriteCache))
			fmt.Fprintf(tw, "fua\t%s\n", yesNo(info.FUA))
			fmt.Fprintf(tw, "write protected\t%s\n", yesNo(info.WriteProtected))
			fmt.Fprintf(tw, "thin provisioning\t%s\n", yesNo(info.ThinProvisioned))
			fmt.Fprintf(tw, "unmap\t%s\n", yesNo(info.Unmap))
			return tw.Flush()
		},
	}
}

type lunInfoJSON struct {
	Target            string `json:"target"`
	Portal            string `json:"portal"`
	Transport         string `json:"transport"`
	LUN               uint16 `json:"lun"`
	Size              int64  `json:"size"`
	BlockSize         uint32 `json:"block_size"`
	PhysicalBlockSize uint32 `json:"physical_block_size"`
	Vendor            string `json:"vendor"`
	Product           string `json:"product"`
	Revision          string `json:"revision"`
	Serial            string `json:"serial"`
	WWN               string `json:"wwn"`
	WriteCache        bool   `json:"write_cache"`
	FUA               bool   `json:"fua"`
	WriteProtected    bool   `json:"write_protected"`
	ThinProvisioned   bool   `json:"thin_provisioned"`
	Unmap             bool   `json:"unmap"`
	MaxTransfer       uint32 `json:"max_transfer"`
}

func lunJSON(l *lunConn) lunInfoJSON {
	i := l.Info()
	st := l.nx.Status()
	return lunInfoJSON{
		Target: l.nx.TargetName(), Portal: st.Portal, Transport: st.Transport, LUN: i.Number,
		Size: i.Size(), BlockSize: i.BlockSize, PhysicalBlockSize: i.PhysicalBlockSize,
		Vendor: i.Vendor, Product: i.Product, Revision: i.Revision, Serial: i.Serial, WWN: i.WWN,
		WriteCache: i.WriteCache, FUA: i.FUA, WriteProtected: i.WriteProtected,
		ThinProvisioned: i.ThinProvisioned, Unmap: i.Unmap, MaxTransfer: l.MaxTransfer(),
	}
}

func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
