package scsi

import (
	"bufio"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The captures in testdata/tgt are real replies of tgtd 1.0.85 to the CDBs
// this package builds, sent over iSCSI/TCP (see the MANIFEST header).

type capture struct {
	cdb    []byte
	status Status
	data   []byte
	sense  []byte
}

func loadTgt(t *testing.T) map[string]capture {
	t.Helper()
	dir := filepath.Join("testdata", "tgt")
	f, err := os.Open(filepath.Join(dir, "MANIFEST"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	caps := map[string]capture{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		fields := strings.Fields(line)
		name := fields[0]
		var c capture
		for _, kv := range fields[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "cdb":
				if c.cdb, err = hex.DecodeString(v); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			case "status":
				var s uint8
				if _, err := hexByte(v, &s); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				c.status = Status(s)
			}
		}
		c.data, _ = os.ReadFile(filepath.Join(dir, name+".data"))
		c.sense, _ = os.ReadFile(filepath.Join(dir, name+".sense"))
		caps[name] = c
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return caps
}

func hexByte(s string, out *uint8) (int, error) {
	b, err := hex.DecodeString(strings.TrimPrefix(s, "0x"))
	if err != nil || len(b) != 1 {
		return 0, errors.New("bad status " + s)
	}
	*out = b[0]
	return 1, nil
}

func TestTgtCaptures(t *testing.T) {
	caps := loadTgt(t)
	get := func(name string, cdb CDB) capture {
		t.Helper()
		c, ok := caps[name]
		if !ok {
			t.Fatalf("capture %s missing", name)
		}
		if string(c.cdb) != string(cdb.Bytes()) {
			t.Errorf("%s: captured CDB % x, builder makes % x", name, c.cdb, cdb.Bytes())
		}
		return c
	}
	checkGood := func(name string, c capture) {
		t.Helper()
		if err := CheckStatus(c.status, c.sense); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	senseOf := func(name string, c capture) *SenseError {
		t.Helper()
		var se *SenseError
		if err := CheckStatus(c.status, c.sense); !errors.As(err, &se) {
			t.Fatalf("%s: CheckStatus = %v, want *SenseError", name, err)
		}
		return se
	}

	t.Run("unit attention then ready", func(t *testing.T) {
		se := senseOf("tur-1", get("tur-1", TestUnitReady()))
		if !se.UnitAttention() || !se.Retryable() || se.ASC != 0x29 || se.ASCQ != 0 {
			t.Errorf("first TUR: %v", se)
		}
		if se.Error() != "UNIT ATTENTION: power on, reset, or bus device reset occurred (asc 0x29 ascq 0x00)" {
			t.Errorf("Error() = %q", se.Error())
		}
		checkGood("tur-2", get("tur-2", TestUnitReady()))
	})

	t.Run("REPORT LUNS", func(t *testing.T) {
		c := get("reportluns", ReportLUNs(0, 4096))
		r, err := ParseReportLUNs(c.data)
		if err != nil || r.Truncated || len(r.LUNs) != 2 {
			t.Fatalf("%+v, %v", r, err)
		}
		for i, want := range []uint16{0, 1} {
			if d := DecodeLUN(r.LUNs[i]); !d.Simple || d.Number != want {
				t.Errorf("LUN %d: %v", i, d)
			}
		}
		c = get("reportluns-short", ReportLUNs(0, 16))
		r, err = ParseReportLUNs(c.data)
		if err != nil || !r.Truncated || len(r.LUNs) != 1 || r.AllocationLength() != 24 {
			t.Errorf("short: %+v, %v", r, err)
		}
	})

	t.Run("INQUIRY", func(t *testing.T) {
		d, err := ParseInquiry(get("inquiry", Inquiry(96)).data)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Connected() || d.DeviceType != TypeDisk || d.Vendor != "IET" || d.Product != "VIRTUAL-DISK" ||
			d.Revision != "0001" || d.Version != 5 || !d.CmdQue || !d.HiSup || d.ResponseDataFormat != 2 {
			t.Errorf("LUN 1: %+v", d)
		}
		if len(d.VersionDescriptors) != 3 || d.VersionDescriptors[1] != 0x0960 {
			t.Errorf("version descriptors %x", d.VersionDescriptors)
		}
		d, err = ParseInquiry(get("inquiry-lun0", Inquiry(96)).data)
		if err != nil || d.DeviceType != TypeStorageArray || d.Product != "Controller" {
			t.Errorf("LUN 0: %+v, %v", d, err)
		}
		// tgt answers INQUIRY for a LUN it lacks with qualifier 3, type 0x1f.
		d, err = ParseInquiry(get("inquiry-lun5", Inquiry(96)).data)
		if err != nil || d.Connected() || d.PeripheralQualifier != QualifierNoLU || d.DeviceType != TypeNoDevice {
			t.Errorf("LUN 5: %+v, %v", d, err)
		}
		se := senseOf("tur-lun5", get("tur-lun5", TestUnitReady()))
		if se.Key != KeyIllegalRequest || se.ASC != 0x25 || se.Retryable() || se.Errno() != syscall.EIO {
			t.Errorf("TUR LUN 5: %v", se)
		}
	})

	t.Run("VPD", func(t *testing.T) {
		pages, err := ParseSupportedVPDPages(get("vpd-00", InquiryVPD(0x00, 4096)).data)
		if err != nil || string(pages) != "\x00\x80\x83\xb0\xb1\xb2" {
			t.Errorf("supported pages % x, %v", pages, err)
		}
		sn, err := ParseUnitSerialNumber(get("vpd-80", InquiryVPD(0x80, 4096)).data)
		if err != nil || sn != "beaf11" {
			t.Errorf("serial %q, %v", sn, err)
		}
		id, err := ParseDeviceIdentification(get("vpd-83", InquiryVPD(0x83, 4096)).data)
		if err != nil || len(id.Designators) != 3 {
			t.Fatalf("device identification %+v, %v", id, err)
		}
		if got := id.WWID(); got != "naa.60000000000000000e00000000010001" {
			t.Errorf("WWID() = %q", got)
		}
		if got := id.Designators[0].String(); got != `t10.IET     00010001\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0` {
			t.Errorf("T10 designator %q", got)
		}
		bl, err := ParseBlockLimits(get("vpd-b0", InquiryVPD(0xb0, 4096)).data)
		// tgt puts 0x80 in byte 5, MAXIMUM COMPARE AND WRITE LENGTH, and
		// reports no transfer limits (sg_vpd decodes it the same way).
		want := BlockLimits{MaxCompareAndWriteLength: 0x80, MaxUnmapLBACount: 0xffffffff, MaxUnmapDescriptorCount: 0xffffffff}
		if err != nil || bl != want {
			t.Errorf("block limits %+v, %v", bl, err)
		}
		lbp, err := ParseLogicalBlockProvisioning(get("vpd-b2", InquiryVPD(0xb2, 4096)).data)
		if err != nil || !lbp.LBPU || !lbp.LBPWS || !lbp.ReadsZeros() || lbp.Type != ProvisioningThin {
			t.Errorf("provisioning %+v, %v", lbp, err)
		}
		se := senseOf("vpd-99", get("vpd-99", InquiryVPD(0x99, 255)))
		if se.Key != KeyIllegalRequest || se.ASC != 0x24 || se.Errno() != syscall.EREMOTEIO {
			t.Errorf("unsupported VPD page: %v", se)
		}
	})

	t.Run("READ CAPACITY", func(t *testing.T) {
		c10, err := ParseReadCapacity10(get("rc10", ReadCapacity10()).data)
		if err != nil || c10 != (Capacity10{LastLBA: 0x1ffff, BlockLength: 512}) {
			t.Errorf("RC10 %+v, %v", c10, err)
		}
		c16, err := ParseReadCapacity16(get("rc16", ReadCapacity16(32)).data)
		if err != nil || c16.Blocks()*uint64(c16.BlockLength) != 64<<20 || !c16.LBPME || !c16.LBPRZ ||
			c16.PhysicalBlockLength() != 4096 {
			t.Errorf("RC16 %+v, %v", c16, err)
		}
	})

	t.Run("MODE SENSE", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			cdb   CDB
			parse func([]byte) (ModeParameters, error)
			bd    int
		}{
			{"modesense6-caching", ModeSense6(true, PCCurrent, ModePageCaching, 0, 192), ParseModeSense6, 0},
			{"modesense6-caching-bd", ModeSense6(false, PCCurrent, ModePageCaching, 0, 255), ParseModeSense6, 8},
			{"modesense10-caching", ModeSense10(true, false, PCCurrent, ModePageCaching, 0, 512), ParseModeSense10, 0},
		} {
			m, err := tc.parse(get(tc.name, tc.cdb).data)
			if err != nil || m.Truncated || m.WriteProtected() || len(m.BlockDescriptors) != tc.bd {
				t.Errorf("%s: %+v, %v", tc.name, m, err)
				continue
			}
			p, ok := m.Page(ModePageCaching, 0)
			if !ok {
				t.Errorf("%s: no caching page", tc.name)
				continue
			}
			if cp, err := ParseCachingPage(p); err != nil || !cp.WCE || cp.RCD {
				t.Errorf("%s: caching %+v, %v", tc.name, cp, err)
			}
		}
		for _, tc := range []struct {
			name  string
			cdb   CDB
			parse func([]byte) (ModeParameters, error)
		}{
			{"modesense6-all", ModeSense6(false, PCCurrent, ModePageAll, 0, 255), ParseModeSense6},
			{"modesense10-all", ModeSense10(false, false, PCCurrent, ModePageAll, 0, 4096), ParseModeSense10},
		} {
			m, err := tc.parse(get(tc.name, tc.cdb).data)
			if err != nil || m.Truncated {
				t.Fatalf("%s: %+v, %v", tc.name, m, err)
			}
			var codes []uint16
			for _, p := range m.Pages {
				codes = append(codes, uint16(p.Code)<<8|uint16(p.Subpage))
			}
			// tgt: empty page 0, disconnect-reconnect, caching, control,
			// control extension (0x0a/0x01), informational exceptions.
			want := []uint16{0x0000, 0x0200, 0x0800, 0x0a00, 0x0a01, 0x1c00}
			if len(codes) != len(want) {
				t.Errorf("%s: pages %04x, want %04x", tc.name, codes, want)
				continue
			}
			for i := range want {
				if codes[i] != want[i] {
					t.Errorf("%s: pages %04x, want %04x", tc.name, codes, want)
					break
				}
			}
			p, _ := m.Page(ModePageControlMode, 0)
			if cp, err := ParseControlPage(p); err != nil || cp.DSense || cp.QueueAlgorithmModifier != 1 {
				t.Errorf("%s: control %+v, %v", tc.name, cp, err)
			}
		}
		m, err := ParseModeSense6(get("modesense6-all-short", ModeSense6(false, PCCurrent, ModePageAll, 0, 24)).data)
		if err != nil || !m.Truncated {
			t.Errorf("short: %+v, %v", m, err)
		}
	})

	t.Run("READ and WRITE", func(t *testing.T) {
		checkGood("write10-fua", get("write10-fua", Write10(16, 8, true)))
		checkGood("read10", get("read10", Read10(16, 8, false)))
		checkGood("write16", get("write16", Write16(0x1ffff-7, 8, false)))
		checkGood("read16-fua", get("read16-fua", Read16(0x1ffff-7, 8, true)))
		for _, tc := range []struct {
			name string
			cdb  CDB
		}{
			{"read10-oor", Read10(0x1ffff, 2, false)},
			{"read16-oor", Read16(1<<40, 1, false)},
			{"write10-oor", Write10(0x20000, 1, false)},
		} {
			se := senseOf(tc.name, get(tc.name, tc.cdb))
			if se.Key != KeyIllegalRequest || se.ASC != 0x21 || se.Retryable() || se.Errno() != syscall.EREMOTEIO {
				t.Errorf("%s: %v", tc.name, se)
			}
		}
		se := senseOf("invalid-opcode", caps["invalid-opcode"])
		if se.ASC != 0x20 || se.Error() != "ILLEGAL REQUEST: invalid command operation code (asc 0x20 ascq 0x00)" {
			t.Errorf("invalid opcode: %v", se)
		}
	})

	t.Run("cache, unmap, write same", func(t *testing.T) {
		checkGood("sync10", get("sync10", SynchronizeCache10(0, 0, false)))
		checkGood("sync16", get("sync16", SynchronizeCache16(16, 8, false)))
		// tgt returns GOOD for UNMAP with stale sense data in the
		// response; CheckStatus must go by the status.
		c := get("unmap", Unmap(40, false))
		if len(c.sense) == 0 {
			t.Error("capture lost tgt's stale sense")
		}
		checkGood("unmap", c)
		checkGood("writesame16-unmap", get("writesame16-unmap", WriteSame16(4096, 64, true, false)))
		checkGood("writesame16-unmap-ndob", get("writesame16-unmap-ndob", WriteSame16(4096, 64, true, true)))
	})

	t.Run("REQUEST SENSE", func(t *testing.T) {
		// tgt answers in fixed format even when descriptor format is asked.
		for _, tc := range []struct {
			name string
			cdb  CDB
		}{
			{"requestsense-fixed", RequestSense(false, 252)},
			{"requestsense-desc", RequestSense(true, 252)},
		} {
			s, err := ParseSense(get(tc.name, tc.cdb).data)
			if err != nil || s.Key != KeyNoSense || s.DescriptorFormat() || s.Deferred() {
				t.Errorf("%s: %+v, %v", tc.name, s, err)
			}
		}
	})
}
