package scsi

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// h decodes space separated hex, as sg3-utils prints CDBs.
func h(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func TestCDBBuilders(t *testing.T) {
	// Rows marked sg3-utils were printed by sg3-utils 1.46 with -vvv for
	// the command in the comment; the others follow the CDB tables of
	// SPC-4 and SBC-4.
	tests := []struct {
		name string
		cdb  CDB
		want string
	}{
		// sg_turs
		{"TEST UNIT READY", TestUnitReady(), "00 00 00 00 00 00"},
		// sg_requests --desc --maxlen=252
		{"REQUEST SENSE desc", RequestSense(true, 252), "03 01 00 00 fc 00"},
		{"REQUEST SENSE fixed", RequestSense(false, 18), "03 00 00 00 12 00"},
		// sg_inq --len=36
		{"INQUIRY", Inquiry(36), "12 00 00 00 24 00"},
		// sg_inq -p 0xb0 --len=64
		{"INQUIRY VPD B0", InquiryVPD(VPDBlockLimits, 64), "12 01 b0 00 40 00"},
		{"INQUIRY VPD 83 long", InquiryVPD(VPDDeviceIdentification, 0x1234), "12 01 83 12 34 00"},
		// sg_readcap
		{"READ CAPACITY(10)", ReadCapacity10(), "25 00 00 00 00 00 00 00 00 00"},
		// sg_readcap -l
		{"READ CAPACITY(16)", ReadCapacity16(32), "9e 10 00 00 00 00 00 00 00 00 00 00 00 20 00 00"},
		// sg_luns --select=2 --maxlen=8192
		{"REPORT LUNS", ReportLUNs(ReportLUNsAll, 8192), "a0 00 02 00 00 00 00 00 20 00 00 00"},
		{"READ(10)", Read10(0x12345678, 0x9abc, false), "28 00 12 34 56 78 00 9a bc 00"},
		{"READ(10) FUA", Read10(1, 8, true), "28 08 00 00 00 01 00 00 08 00"},
		{"WRITE(10)", Write10(0xfffffffe, 0xffff, false), "2a 00 ff ff ff fe 00 ff ff 00"},
		{"WRITE(10) FUA", Write10(0x800, 0x100, true), "2a 08 00 00 08 00 00 01 00 00"},
		{"READ(16)", Read16(0x0102030405060708, 0x0a0b0c0d, false), "88 00 01 02 03 04 05 06 07 08 0a 0b 0c 0d 00 00"},
		{"WRITE(16) FUA", Write16(0x100000000, 0x10000, true), "8a 08 00 00 00 01 00 00 00 00 00 01 00 00 00 00"},
		// sg_sync --lba=0x12345678 --count=0x99 --immed
		{"SYNCHRONIZE CACHE(10) immed", SynchronizeCache10(0x12345678, 0x99, true), "35 02 12 34 56 78 00 00 99 00"},
		// sg_sync
		{"SYNCHRONIZE CACHE(10) all", SynchronizeCache10(0, 0, false), "35 00 00 00 00 00 00 00 00 00"},
		// sg_sync --16 --lba=0x123456789a --count=0x10000
		{"SYNCHRONIZE CACHE(16)", SynchronizeCache16(0x123456789a, 0x10000, false), "91 00 00 00 00 12 34 56 78 9a 00 01 00 00 00 00"},
		{"SYNCHRONIZE CACHE(16) immed", SynchronizeCache16(0, 0, true), "91 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
		// sg_unmap --lba=5,0x100000000 --num=7,0x20
		{"UNMAP", Unmap(0x28, false), "42 00 00 00 00 00 00 00 28 00"},
		{"UNMAP anchor", Unmap(0x18, true), "42 01 00 00 00 00 00 00 18 00"},
		// sg_write_same --16 -U -N --lba=0x1000 --num=0x800
		{"WRITE SAME(16) UNMAP NDOB", WriteSame16(0x1000, 0x800, true, true), "93 09 00 00 00 00 00 00 10 00 00 00 08 00 00 00"},
		{"WRITE SAME(16) UNMAP", WriteSame16(0x1000, 0x800, true, false), "93 08 00 00 00 00 00 00 10 00 00 00 08 00 00 00"},
		{"WRITE SAME(16)", WriteSame16(1, 1, false, false), "93 00 00 00 00 00 00 00 00 01 00 00 00 01 00 00"},
		// Linux sd_read_cache_type asks MODE SENSE(6) page 8, DBD, current.
		{"MODE SENSE(6) caching", ModeSense6(true, PCCurrent, ModePageCaching, 0, 192), "1a 08 08 00 c0 00"},
		{"MODE SENSE(6) control default", ModeSense6(false, PCDefault, ModePageControlMode, 0, 0xff), "1a 00 8a 00 ff 00"},
		{"MODE SENSE(6) all subpages changeable", ModeSense6(false, PCChangeable, ModePageAll, 0xff, 0xff), "1a 00 7f ff ff 00"},
		{"MODE SENSE(10) caching", ModeSense10(true, false, PCCurrent, ModePageCaching, 0, 512), "5a 08 08 00 00 00 00 02 00 00"},
		{"MODE SENSE(10) control saved llbaa", ModeSense10(false, true, PCSaved, ModePageControlMode, 0, 0xffff), "5a 10 ca 00 00 00 00 ff ff 00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := h(t, tt.want)
			if got := tt.cdb.Bytes(); !bytes.Equal(got, want) {
				t.Errorf("got  % x\nwant % x", got, want)
			}
			if tt.cdb.Len() != len(want) {
				t.Errorf("Len() = %d, want %d", tt.cdb.Len(), len(want))
			}
			if tt.cdb.Opcode() != Opcode(want[0]) {
				t.Errorf("Opcode() = %v, want 0x%02x", tt.cdb.Opcode(), want[0])
			}
		})
	}
}

func TestReadWriteChoose(t *testing.T) {
	tests := []struct {
		lba    uint64
		blocks uint32
		want   Opcode
	}{
		{0, 0, OpRead10},
		{0xffffffff, 0xffff, OpRead10},
		{0x100000000, 1, OpRead16},
		{0, 0x10000, OpRead16},
		{0xffffffffffffffff, 0xffffffff, OpRead16},
	}
	for _, tt := range tests {
		r := Read(tt.lba, tt.blocks, true)
		if r.Opcode() != tt.want {
			t.Errorf("Read(%#x, %#x) = %v, want %v", tt.lba, tt.blocks, r.Opcode(), tt.want)
		}
		w := Write(tt.lba, tt.blocks, true)
		wantW := OpWrite10
		if tt.want == OpRead16 {
			wantW = OpWrite16
		}
		if w.Opcode() != wantW {
			t.Errorf("Write(%#x, %#x) = %v, want %v", tt.lba, tt.blocks, w.Opcode(), wantW)
		}
		// The chosen CDB carries the same LBA, count and FUA as the
		// explicit builder.
		var explicit CDB
		if tt.want == OpRead10 {
			explicit = Read10(uint32(tt.lba), uint16(tt.blocks), true)
		} else {
			explicit = Read16(tt.lba, tt.blocks, true)
		}
		if !bytes.Equal(r.Bytes(), explicit.Bytes()) {
			t.Errorf("Read(%#x, %#x) = % x, want % x", tt.lba, tt.blocks, r.Bytes(), explicit.Bytes())
		}
	}
}

func TestCDBNoAlloc(t *testing.T) {
	var bhsCDB [16]byte
	lba := uint64(1 << 33)
	allocs := testing.AllocsPerRun(100, func() {
		c := Write(lba, 256, true)
		copy(bhsCDB[:], c.Bytes())
		lba++
	})
	if allocs != 0 {
		t.Errorf("building and copying a CDB allocates %v times, want 0", allocs)
	}
	if bhsCDB[0] != byte(OpWrite16) {
		t.Errorf("copied opcode 0x%02x", bhsCDB[0])
	}
}

func TestCDBString(t *testing.T) {
	got := Read10(8, 1, false).String()
	want := "READ(10) [28 00 00 00 00 08 00 00 01 00]"
	if got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if s := Opcode(0xc7).String(); s != "opcode 0xc7" {
		t.Errorf("unknown opcode String() = %q", s)
	}
}
