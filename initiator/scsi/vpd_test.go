package scsi

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestVPDHeaderErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"short header", "00 00 00", ErrShortData},
		{"wrong page", "00 80 00 02 00 80", ErrMalformed},
		{"page length past end", "00 00 00 05 00 80", ErrShortData},
	}
	for _, tt := range tests {
		if _, err := ParseSupportedVPDPages(h(t, tt.in)); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if n, err := VPDLength(h(t, "00 83 01 00")); err != nil || n != 260 {
		t.Errorf("VPDLength = %d, %v; want 260", n, err)
	}
}

func TestSupportedVPDPages(t *testing.T) {
	got, err := ParseSupportedVPDPages(h(t, "00 00 00 06 00 80 83 b0 b1 b2 ff ff"))
	if err != nil || !bytes.Equal(got, []byte{0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2}) {
		t.Fatalf("got % x, %v", got, err)
	}
	if b := MarshalSupportedVPDPages(got); !bytes.Equal(b, h(t, "00 00 00 06 00 80 83 b0 b1 b2")) {
		t.Errorf("Marshal % x", b)
	}
}

func TestUnitSerialNumber(t *testing.T) {
	got, err := ParseUnitSerialNumber(h(t, "00 80 00 08 20 20 62 65 61 66 31 31"))
	if err != nil || got != "beaf11" {
		t.Fatalf("got %q, %v", got, err)
	}
	if got, err := ParseUnitSerialNumber(h(t, "00 80 00 00")); err != nil || got != "" {
		t.Errorf("empty serial: %q, %v", got, err)
	}
	if b := MarshalUnitSerialNumber("abc"); !bytes.Equal(b, h(t, "00 80 00 03 61 62 63")) {
		t.Errorf("Marshal % x", b)
	}
}

func TestBlockLimits(t *testing.T) {
	// LIO rd_mcp with emulate_tpu=1: max transfer 8192 blocks, optimal
	// 8192, max unmap 8192 LBAs in 1 descriptor, max write same 0xffff.
	b := h(t, `00 b0 00 3c 01 01 00 01  00 00 20 00 00 00 20 00
		00 00 00 00 00 00 20 00  00 00 00 01 00 00 00 08
		80 00 00 04 00 00 00 00  00 00 ff ff 00 00 00 00
		00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00`)
	got, err := ParseBlockLimits(b)
	if err != nil {
		t.Fatal(err)
	}
	want := BlockLimits{
		WSNZ: true, MaxCompareAndWriteLength: 1, OptimalTransferLengthGranularity: 1,
		MaxTransferLength: 8192, OptimalTransferLength: 8192, MaxUnmapLBACount: 8192,
		MaxUnmapDescriptorCount: 1, OptimalUnmapGranularity: 8, UGAValid: true,
		UnmapGranularityAlignment: 4, MaxWriteSameLength: 0xffff,
	}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if m := got.Marshal(); !bytes.Equal(m, b) {
		t.Errorf("Marshal\ngot  % x\nwant % x", m, b)
	}
	// An SBC-2 era page ends after OPTIMAL TRANSFER LENGTH.
	short, err := ParseBlockLimits(h(t, "00 b0 00 0c 00 00 00 00 00 00 04 00 00 00 00 80"))
	if err != nil || short != (BlockLimits{MaxTransferLength: 1024, OptimalTransferLength: 128}) {
		t.Errorf("short page: %+v, %v", short, err)
	}
	if _, err := ParseBlockLimits(h(t, "00 b0 00 04 00 00 00 00")); !errors.Is(err, ErrShortData) {
		t.Errorf("4-byte page: %v", err)
	}
}

func TestLogicalBlockProvisioning(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want LogicalBlockProvisioning
		zero bool
	}{
		// tgt 1.0.85 with thin_provisioning=1 (testdata/tgt/vpd-b2.data).
		{"tgt thin", "00 b2 00 04 00 e4 02 00",
			LogicalBlockProvisioning{LBPU: true, LBPWS: true, LBPWS10: true, LBPRZ: 1, Type: ProvisioningThin}, true},
		// LIO with emulate_tpu=1 emulate_tpws=1 on a thin backend.
		{"lio", "00 b2 00 04 00 c0 02 00",
			LogicalBlockProvisioning{LBPU: true, LBPWS: true, Type: ProvisioningThin}, false},
		{"all fields", "00 b2 00 08 0c 1f ab 50 00 00 00 00",
			LogicalBlockProvisioning{ThresholdExponent: 12, LBPRZ: 7, ANCSup: true, DP: true,
				MinimumPercentage: 21, Type: 3, ThresholdPercentage: 0x50}, true},
	}
	for _, tt := range tests {
		got, err := ParseLogicalBlockProvisioning(h(t, tt.in))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got != tt.want || got.ReadsZeros() != tt.zero {
			t.Errorf("%s: got %+v (ReadsZeros %v)", tt.name, got, got.ReadsZeros())
		}
		again, err := ParseLogicalBlockProvisioning(got.Marshal())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%s: round trip %+v, %v", tt.name, again, err)
		}
	}
	if _, err := ParseLogicalBlockProvisioning(h(t, "00 b2 00 02 00 e4")); !errors.Is(err, ErrShortData) {
		t.Errorf("short page: %v", err)
	}
}
