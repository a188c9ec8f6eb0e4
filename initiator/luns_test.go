package initiator_test

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// TestPickDiskLUNLongReport: a LUN list longer than the first REPORT LUNS
// allocation is read again whole; LUNs in an address method the initiator
// cannot open are skipped, and so is a disk that is not connected
// (peripheral qualifier 1). A fake target, as tgt reports few LUNs.
func TestPickDiskLUNLongReport(t *testing.T) {
	var report scsi.ReportLUNsData
	for n := uint16(104); n >= 5; n-- { // descending: the order is the target's
		l, _ := scsi.EncodeLUN(n)
		report.LUNs = append(report.LUNs, l)
	}
	report.LUNs = append(report.LUNs, scsi.LUN{0xc1, 0, 0, 0, 0, 0, 0, 0}) // extended addressing
	var mu sync.Mutex
	var allocs []uint32
	h := withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() != pdu.OpSCSICommand {
			return tg.Good(req)
		}
		tg.Ack(req)
		var c pdu.SCSICommand
		_ = c.Unmarshal(&req.BHS)
		switch c.CDB[0] {
		case 0xa0: // REPORT LUNS
			alloc := binary.BigEndian.Uint32(c.CDB[6:10])
			mu.Lock()
			allocs = append(allocs, alloc)
			mu.Unlock()
			return dataInGood(tg, &c, report.Marshal()[:min(int(alloc), len(report.Marshal()))])
		case 0x12: // INQUIRY
			n := scsi.DecodeLUN(c.LUN).Number
			inq := scsi.InquiryData{DeviceType: scsi.TypeTape, Version: 6, ResponseDataFormat: 2,
				Vendor: "FAKE", Product: "LUN", Revision: "1"}
			if n >= 70 {
				inq.DeviceType = scsi.TypeDisk
			}
			if n == 70 {
				inq.PeripheralQualifier = scsi.QualifierNotConnected
			}
			return dataInGood(tg, &c, inq.Marshal())
		}
		return tg.Good(req)
	})
	s, _, err := loginTo(t, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	nums, err := initiator.ReportLUNs(ctx5(t), s)
	if err != nil || len(nums) != 100 || nums[0] != 5 || nums[99] != 104 {
		t.Fatalf("ReportLUNs = %v, %v", nums, err)
	}
	mu.Lock()
	if len(allocs) != 2 || allocs[1] < uint32(8+8*len(report.LUNs)) {
		t.Fatalf("REPORT LUNS allocation lengths %v, want a second one holding %d LUNs", allocs, len(report.LUNs))
	}
	mu.Unlock()
	if n, err := initiator.PickDiskLUN(ctx5(t), s, nil); err != nil || n != 71 {
		t.Fatalf("PickDiskLUN = %d, %v; want 71", n, err)
	}
	seventy := uint16(70)
	if _, err := initiator.PickDiskLUN(ctx5(t), s, &seventy); err == nil {
		t.Fatal("PickDiskLUN(70) accepted a LUN that is not connected")
	}
}
