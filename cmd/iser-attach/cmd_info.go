package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/scsi"
	"github.com/iser-attach/iser-attach/volume"
)

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:  "info",
		Usage: "log in and list the target's LUNs, or with --lun describe one: size, block size, vendor, product, WWN, write cache, thin provisioning",
		Flags: append(targetFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			ctx, cancel := timeoutContext(c, c.Duration("login-timeout")+15*time.Second)
			defer cancel()
			sp, err := specFromFlags(c)
			if err != nil {
				return err
			}
			if sp.AnyLUN {
				return listLUNs(ctx, sp, c.Bool("json"))
			}
			l, err := openLUN(ctx, sp)
			if err != nil {
				return err
			}
			defer l.Close()
			info := lunJSON(l, sp.InitiatorName)
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "target\t%s\n", info.Target)
			fmt.Fprintf(tw, "portal\t%s\n", info.Portal)
			fmt.Fprintf(tw, "transport\t%s\n", info.Transport)
			fmt.Fprintf(tw, "initiator\t%s\n", info.Initiator)
			fmt.Fprintf(tw, "lun\t%d\n", info.LUN)
			fmt.Fprintf(tw, "type\t%s\n", info.Type)
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
			if err := tw.Flush(); err != nil {
				return err
			}
			return writeInfoPaths(os.Stdout, info.Paths)
		},
	}
}

type lunInfoJSON struct {
	Target            string `json:"target"`
	Portal            string `json:"portal"`
	Transport         string `json:"transport"`
	Initiator         string `json:"initiator"`
	LUN               uint16 `json:"lun"`
	Type              string `json:"type"`
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
	// Error is why a disk LUN could not be opened (info without --lun).
	Error string `json:"error,omitempty"`
	// Paths holds each path with several portals, as list --json shows
	// them; none with one portal.
	Paths []volume.PathStatus `json:"paths,omitempty"`
}

// writeInfoPaths writes info's paths after its other lines: a line
// saying how many, then their table (every column).
func writeInfoPaths(w io.Writer, paths []volume.PathStatus) error {
	if len(paths) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%d paths\n", len(paths))
	return writePathTable(w, "  ", paths, true)
}

func lunJSON(l *lunConn, initiatorName string) lunInfoJSON {
	return infoJSON(l.nx, initiatorName, scsi.TypeDisk, l.Info(), l.MaxTransfer())
}

func infoJSON(nx nexusHandle, initiatorName string, typ scsi.DeviceType, i initiator.LUNInfo, maxTransfer uint32) lunInfoJSON {
	st := nx.Status()
	var paths []volume.PathStatus
	if m, ok := nx.(*initiator.Multipath); ok {
		paths = pathStatuses(m.Paths())
	}
	return lunInfoJSON{
		Target: nx.TargetName(), Portal: st.Portal, Transport: st.Transport, Initiator: initiatorName,
		LUN: i.Number, Type: typ.String(),
		Size: i.Size(), BlockSize: i.BlockSize, PhysicalBlockSize: i.PhysicalBlockSize,
		Vendor: i.Vendor, Product: i.Product, Revision: i.Revision, Serial: i.Serial, WWN: i.WWN,
		WriteCache: i.WriteCache, FUA: i.FUA, WriteProtected: i.WriteProtected,
		ThinProvisioned: i.ThinProvisioned, Unmap: i.Unmap, MaxTransfer: maxTransfer, Paths: paths,
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
