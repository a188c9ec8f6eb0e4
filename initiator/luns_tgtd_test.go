package initiator_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/scsi"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestTgtdLUNs: tgt reports its controller at LUN 0 and the backing stores
// from LUN 1; PickDiskLUN takes LUN 1 by default, accepts any disk, and
// refuses the controller and missing LUNs with the list of disks.
func TestTgtdLUNs(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:luns", LUNs: []tgttest.LUN{
		{Size: 64 << 20}, {Size: 32 << 20, BlockSize: 4096}, {Size: 16 << 20}}})
	s, err := tgtLogin(t, srv, "iqn.2026-11.test:luns", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	nums, err := initiator.ReportLUNs(ctx, s)
	if err != nil || !slices.Equal(nums, []uint16{0, 1, 2, 3}) {
		t.Fatalf("ReportLUNs = %v, %v", nums, err)
	}
	all, err := initiator.DescribeLUNs(ctx, s)
	if err != nil || len(all) != 4 {
		t.Fatalf("DescribeLUNs = %+v, %v", all, err)
	}
	if c := all[0]; c.Number != 0 || c.DeviceType != scsi.TypeStorageArray || c.Disk() || c.Info.Size() != 0 ||
		c.Vendor != "IET" || c.Product != "Controller" {
		t.Fatalf("LUN 0: %+v", c)
	}
	sizes := []int64{64 << 20, 32 << 20, 16 << 20}
	blocks := []uint32{512, 4096, 512}
	wwns := map[string]bool{}
	for i, d := range all[1:] {
		if d.Err != nil || !d.Disk() || d.Number != uint16(i+1) || d.Info.Number != d.Number ||
			d.Info.Size() != sizes[i] || d.Info.BlockSize != blocks[i] || !strings.HasPrefix(d.Info.WWN, "naa.") {
			t.Fatalf("LUN %d: %+v", i+1, d)
		}
		wwns[d.Info.WWN] = true
	}
	if len(wwns) != 3 {
		t.Fatalf("WWNs are not distinct: %v", wwns)
	}

	if n, err := initiator.PickDiskLUN(ctx, s, nil); err != nil || n != 1 {
		t.Fatalf("PickDiskLUN(nil) = %d, %v; want 1", n, err)
	}
	two := uint16(2)
	if n, err := initiator.PickDiskLUN(ctx, s, &two); err != nil || n != 2 {
		t.Fatalf("PickDiskLUN(2) = %d, %v", n, err)
	}
	zero := uint16(0)
	_, err = initiator.PickDiskLUN(ctx, s, &zero)
	if err == nil || err.Error() != "LUN 0 is a controller (type 0x0c), not a disk; disk LUNs: 1, 2, 3" {
		t.Fatalf("PickDiskLUN(0) = %v", err)
	}
	nine := uint16(9)
	_, err = initiator.PickDiskLUN(ctx, s, &nine)
	if !errors.Is(err, initiator.ErrLUNNotFound) || !strings.Contains(err.Error(), "disk LUNs: 1, 2, 3") {
		t.Fatalf("PickDiskLUN(9) = %v", err)
	}
}
