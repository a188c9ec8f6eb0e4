package scsi

import (
	"bytes"
	"errors"
	"testing"
)

func TestReadCapacity10(t *testing.T) {
	c, err := ParseReadCapacity10(h(t, "00 01 ff ff 00 00 02 00"))
	if err != nil || c != (Capacity10{LastLBA: 0x1ffff, BlockLength: 512}) || c.NeedsReadCapacity16() {
		t.Fatalf("got %+v, %v", c, err)
	}
	if !bytes.Equal(c.Marshal(), h(t, "00 01 ff ff 00 00 02 00")) {
		t.Errorf("Marshal % x", c.Marshal())
	}
	big, err := ParseReadCapacity10(h(t, "ff ff ff ff 00 00 10 00"))
	if err != nil || !big.NeedsReadCapacity16() {
		t.Errorf("2 TiB+ device: %+v, %v", big, err)
	}
	if _, err := ParseReadCapacity10(h(t, "00 01 ff ff 00 00 02")); !errors.Is(err, ErrShortData) {
		t.Errorf("7 bytes: %v", err)
	}
}

func TestReadCapacity16(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Capacity16
	}{
		// tgt 1.0.85, 64 MiB file LUN, thin (testdata/tgt/rc16.data).
		{"tgt thin", "00 00 00 00 00 01 ff ff 00 00 02 00 00 03 c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
			Capacity16{LastLBA: 0x1ffff, BlockLength: 512, LogicalPerPhysicalExponent: 3, LBPME: true, LBPRZ: true}},
		{"4Kn, PI type 2, aligned 7", "00 00 00 01 00 00 00 00 00 00 10 00 1b 20 00 07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
			Capacity16{LastLBA: 1 << 32, BlockLength: 4096, RCBasis: 1, PType: 5, ProtEn: true, PIExponent: 2, LowestAlignedLBA: 7}},
		{"all ones", "ff ff ff ff ff ff ff fe ff ff ff ff ff ff ff ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
			Capacity16{LastLBA: 0xfffffffffffffffe, BlockLength: 0xffffffff, RCBasis: 3, PType: 7, ProtEn: true,
				PIExponent: 15, LogicalPerPhysicalExponent: 15, LBPME: true, LBPRZ: true, LowestAlignedLBA: 0x3fff}},
		{"12 bytes", "00 00 00 00 00 00 00 ff 00 00 02 00",
			Capacity16{LastLBA: 0xff, BlockLength: 512}},
	}
	for _, tt := range tests {
		got, err := ParseReadCapacity16(h(t, tt.in))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got != tt.want {
			t.Errorf("%s:\ngot  %+v\nwant %+v", tt.name, got, tt.want)
		}
		again, err := ParseReadCapacity16(got.Marshal())
		if err != nil || again != got {
			t.Errorf("%s: round trip %+v, %v", tt.name, again, err)
		}
	}
	if _, err := ParseReadCapacity16(h(t, "00 00 00 00 00 00 00 ff 00 00 02")); !errors.Is(err, ErrShortData) {
		t.Errorf("11 bytes: %v", err)
	}
}

func TestCapacity16Derived(t *testing.T) {
	c := Capacity16{LastLBA: 0x1ffff, BlockLength: 512, LogicalPerPhysicalExponent: 3}
	if c.Blocks() != 0x20000 || c.PhysicalBlockLength() != 4096 || c.ProtectionType() != 0 {
		t.Errorf("Blocks %d PhysicalBlockLength %d ProtectionType %d", c.Blocks(), c.PhysicalBlockLength(), c.ProtectionType())
	}
	c = Capacity16{ProtEn: true, PType: 1}
	if c.ProtectionType() != 2 {
		t.Errorf("ProtectionType() = %d, want 2", c.ProtectionType())
	}
}
