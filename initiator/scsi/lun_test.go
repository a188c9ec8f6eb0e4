package scsi

import (
	"errors"
	"testing"
)

func TestEncodeLUN(t *testing.T) {
	// Expected bytes follow Linux int_to_scsilun for the LUN numbers
	// scsilun_to_int would produce: flat space LUN n is Linux LUN 0x4000|n.
	tests := []struct {
		n    uint16
		want string
	}{
		{0, "00 00 00 00 00 00 00 00"},
		{1, "00 01 00 00 00 00 00 00"},
		{255, "00 ff 00 00 00 00 00 00"},
		{256, "41 00 00 00 00 00 00 00"},
		{0x1234, "52 34 00 00 00 00 00 00"},
		{16383, "7f ff 00 00 00 00 00 00"},
	}
	for _, tt := range tests {
		l, err := EncodeLUN(tt.n)
		if err != nil {
			t.Fatalf("EncodeLUN(%d): %v", tt.n, err)
		}
		if want := h(t, tt.want); string(l[:]) != string(want) {
			t.Errorf("EncodeLUN(%d) = % x, want % x", tt.n, l[:], want)
		}
		d := DecodeLUN(l)
		if !d.Simple || d.Number != tt.n {
			t.Errorf("DecodeLUN(EncodeLUN(%d)) = %+v", tt.n, d)
		}
	}
	if _, err := EncodeLUN(16384); !errors.Is(err, ErrMalformed) {
		t.Errorf("EncodeLUN(16384) err = %v, want ErrMalformed", err)
	}
}

func TestDecodeLUN(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		method AddressMethod
		bus    uint8
		number uint16
		simple bool
		str    string
	}{
		{"peripheral 0", "00 00 00 00 00 00 00 00", AddressPeripheral, 0, 0, true, "0"},
		{"peripheral 7", "00 07 00 00 00 00 00 00", AddressPeripheral, 0, 7, true, "7"},
		{"peripheral bus 2", "02 07 00 00 00 00 00 00", AddressPeripheral, 2, 7, false, "0207000000000000"},
		{"flat 300", "41 2c 00 00 00 00 00 00", AddressFlat, 0, 300, true, "300"},
		{"flat 5 (not canonical, still simple)", "40 05 00 00 00 00 00 00", AddressFlat, 0, 5, true, "5"},
		{"two level", "00 01 00 02 00 00 00 00", AddressPeripheral, 0, 1, false, "0001000200000000"},
		{"logical unit addressing", "81 23 00 00 00 00 00 00", AddressLogicalUnit, 0, 0, false, "8123000000000000"},
		{"extended well known REPORT LUNS", "c1 01 00 00 00 00 00 00", AddressExtended, 0, 0, false, "c101000000000000"},
	}
	for _, tt := range tests {
		var l LUN
		copy(l[:], h(t, tt.in))
		d := DecodeLUN(l)
		if d.Method != tt.method || d.Bus != tt.bus || d.Simple != tt.simple || (tt.simple && d.Number != tt.number) || d.Raw != l {
			t.Errorf("%s: got %+v", tt.name, d)
		}
		if d.String() != tt.str {
			t.Errorf("%s: String() = %q, want %q", tt.name, d.String(), tt.str)
		}
	}
}
