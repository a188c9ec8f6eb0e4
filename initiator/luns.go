package initiator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// The logical units of a target: REPORT LUNS, a standard INQUIRY of each,
// and the choice of the disk to use when none is named.

// maxReportLUNsAlloc bounds the REPORT LUNS allocation length: 128 Ki LUNs.
const maxReportLUNsAlloc = 1 << 20

// LUNEntry is one logical unit as REPORT LUNS and its standard INQUIRY data
// describe it.
type LUNEntry struct {
	Number     uint16
	DeviceType scsi.DeviceType
	// Connected is peripheral qualifier 0: a device is there.
	Connected                 bool
	Vendor, Product, Revision string
}

// Disk reports whether the LUN is a connected direct-access block device
// (peripheral device type 0), the only kind this initiator opens.
func (e LUNEntry) Disk() bool { return e.Connected && e.DeviceType == scsi.TypeDisk }

// handle is a LUN for sending commands to logical unit n with LUN.exec's
// retries, without probing it.
func handle(s Executor, n uint16) (*LUN, error) {
	enc, err := scsi.EncodeLUN(n)
	if err != nil {
		return nil, err
	}
	return &LUN{s: s, lun: enc, retries: 8, info: LUNInfo{Number: n}}, nil
}

// ReportLUNs asks the target for its logical units (REPORT LUNS, select
// report 0, sent to LUN 0) and returns their numbers in ascending order.
// LUNs in an addressing method other than single-level peripheral or flat
// space, which this initiator cannot open, are left out.
func ReportLUNs(ctx context.Context, s Executor) ([]uint16, error) {
	l, err := handle(s, 0)
	if err != nil {
		return nil, err
	}
	alloc := uint32(8 + 8*64)
	for {
		buf := make([]byte, alloc)
		r, err := l.exec(ctx, scsi.ReportLUNs(scsi.ReportLUNsDefault, alloc), buf, nil)
		if err != nil {
			return nil, fmt.Errorf("report LUNs: %w", err)
		}
		data, err := scsi.ParseReportLUNs(buf[:r.Transferred(len(buf))])
		if err != nil {
			return nil, fmt.Errorf("report LUNs: %w", err)
		}
		if data.Truncated && data.AllocationLength() > alloc && data.AllocationLength() <= maxReportLUNsAlloc {
			alloc = data.AllocationLength()
			continue
		}
		var out []uint16
		for _, raw := range data.LUNs {
			if d := scsi.DecodeLUN(raw); d.Simple {
				out = append(out, d.Number)
			}
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	}
}

// InquireLUN reads the standard INQUIRY data of logical unit n.
func InquireLUN(ctx context.Context, s Executor, n uint16) (LUNEntry, error) {
	l, err := handle(s, n)
	if err != nil {
		return LUNEntry{}, fmt.Errorf("inquire LUN %d: %w", n, err)
	}
	inq, err := l.inquiry(ctx)
	if err != nil {
		return LUNEntry{}, fmt.Errorf("inquire LUN %d: %w", n, err)
	}
	return LUNEntry{Number: n, DeviceType: inq.DeviceType, Connected: inq.Connected(),
		Vendor: inq.Vendor, Product: inq.Product, Revision: inq.Revision}, nil
}

// inquiry reads and decodes the standard INQUIRY data.
func (l *LUN) inquiry(ctx context.Context) (scsi.InquiryData, error) {
	buf := make([]byte, 255)
	r, err := l.exec(ctx, scsi.Inquiry(uint16(len(buf))), buf, nil)
	if err != nil {
		return scsi.InquiryData{}, notFound(err)
	}
	inq, err := scsi.ParseInquiry(buf[:r.Transferred(len(buf))])
	if err != nil {
		return scsi.InquiryData{}, fmt.Errorf("INQUIRY: %w", err)
	}
	return inq, nil
}

// ListLUNs returns every logical unit the target reports, with its
// INQUIRY data, in ascending order.
func ListLUNs(ctx context.Context, s Executor) ([]LUNEntry, error) {
	nums, err := ReportLUNs(ctx, s)
	if err != nil {
		return nil, err
	}
	out := make([]LUNEntry, 0, len(nums))
	for _, n := range nums {
		e, err := InquireLUN(ctx, s, n)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// PickDiskLUN chooses the logical unit to open. With want nil it is the
// lowest-numbered disk (direct-access, peripheral device type 0) the target
// reports: tgt, for one, puts its controller at LUN 0 and the first backing
// store at LUN 1. An explicit want is returned when it is a disk; when it
// is not there or not a disk, the error says what it is and lists the
// target's disk LUNs.
func PickDiskLUN(ctx context.Context, s Executor, want *uint16) (uint16, error) {
	if want != nil {
		e, err := InquireLUN(ctx, s, *want)
		if err == nil && e.Disk() {
			return *want, nil
		}
		if err != nil && !errors.Is(err, ErrLUNNotFound) {
			return 0, err
		}
		disks := "unknown"
		if all, lerr := ListLUNs(ctx, s); lerr == nil {
			disks = diskList(all)
		}
		switch {
		case err != nil || !e.Connected:
			return 0, fmt.Errorf("LUN %d: %w; disk LUNs: %s", *want, ErrLUNNotFound, disks)
		default:
			return 0, fmt.Errorf("LUN %d is a %s (type 0x%02x), not a disk; disk LUNs: %s",
				*want, e.DeviceType, uint8(e.DeviceType), disks)
		}
	}
	all, err := ListLUNs(ctx, s)
	if err != nil {
		return 0, fmt.Errorf("choose a LUN: %w", err)
	}
	for _, e := range all {
		if e.Disk() {
			return e.Number, nil
		}
	}
	var have []string
	for _, e := range all {
		have = append(have, fmt.Sprintf("LUN %d: %s", e.Number, e.DeviceType))
	}
	if len(have) == 0 {
		have = append(have, "none reported")
	}
	return 0, fmt.Errorf("choose a LUN: %w: the target has no disk LUN (%s)", ErrLUNNotFound, strings.Join(have, ", "))
}

func diskList(all []LUNEntry) string {
	var disks []string
	for _, e := range all {
		if e.Disk() {
			disks = append(disks, fmt.Sprint(e.Number))
		}
	}
	if len(disks) == 0 {
		return "none"
	}
	return strings.Join(disks, ", ")
}

// LUNDescription is what DescribeLUNs found about one logical unit.
type LUNDescription struct {
	LUNEntry
	// Info is OpenLUN's for a disk; for other devices it holds the
	// number, INQUIRY strings and VPD serial and WWN only.
	Info LUNInfo
	// MaxTransfer is LUN.MaxTransfer for a disk, 0 otherwise.
	MaxTransfer uint32
	// Err is why a disk could not be opened; nil otherwise.
	Err error
}

// DescribeLUNs lists every logical unit of the target (ListLUNs) and
// probes each: disks as OpenLUN does (capacity, VPD, caching), other
// devices by their VPD serial number and device identification.
func DescribeLUNs(ctx context.Context, s Executor) ([]LUNDescription, error) {
	all, err := ListLUNs(ctx, s)
	if err != nil {
		return nil, err
	}
	out := make([]LUNDescription, 0, len(all))
	for _, e := range all {
		d := LUNDescription{LUNEntry: e}
		if e.Disk() {
			l, err := OpenLUN(ctx, s, e.Number)
			if err != nil {
				d.Err = err
				d.Info = LUNInfo{Number: e.Number, Vendor: e.Vendor, Product: e.Product, Revision: e.Revision}
			} else {
				d.Info, d.MaxTransfer = l.Info(), l.MaxTransfer()
			}
		} else {
			l, err := handle(s, e.Number)
			if err != nil {
				return nil, err
			}
			l.info.Vendor, l.info.Product, l.info.Revision = e.Vendor, e.Product, e.Revision
			if e.Connected {
				l.readVPD(ctx)
			}
			d.Info = l.info
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("describe LUNs: %w", ctx.Err())
		}
		out = append(out, d)
	}
	return out, nil
}
