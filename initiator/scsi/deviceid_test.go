package scsi

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// lioVPD83 is laid out like LIO's VPD page 0x83 for an iSCSI LUN: NAA IEEE
// Registered Extended, T10 vendor ID, relative target port, target port
// group, logical unit group, and SCSI name strings for the target port and
// target device.
const lioVPD83 = `00 83 00 90
	01 03 00 10 60 01 40 51 23 45 67 89 ab cd ef 01 23 45 67 89
	02 01 00 30 4c 49 4f 2d 4f 52 47 20 66 69 6c 65 30 20 20 20 20 20 20 20 20 20 20 20
	    31 32 33 34 35 36 37 38 2d 39 61 62 63 2d 34 64 65 66 2d 38 30 31 32 00
	51 94 00 04 00 00 00 01
	51 95 00 04 00 00 00 00
	01 06 00 04 00 00 00 00
	53 98 00 1c 69 71 6e 2e 32 30 32 35 2d 30 31 2e 74 3a 31 2c 74 2c 30 78 30 30 30 31 00 00 00 00
	53 a8 00 0c 69 71 6e 2e 32 30 32 35 2d 30 31 00`

func TestParseDeviceIdentificationLIO(t *testing.T) {
	b := h(t, lioVPD83)
	id, err := ParseDeviceIdentification(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(id.Designators) != 7 {
		t.Fatalf("%d designators, want 7: %+v", len(id.Designators), id.Designators)
	}
	naa := id.Designators[0]
	want := Designator{CodeSet: CodeSetBinary, Association: AssocLogicalUnit, Type: DesignatorNAA,
		Value: h(t, "60 01 40 51 23 45 67 89 ab cd ef 01 23 45 67 89")}
	if !reflect.DeepEqual(naa, want) {
		t.Errorf("NAA designator %+v", naa)
	}
	rtp := id.Designators[2]
	if !rtp.PIV || rtp.ProtocolIdentifier != 5 || rtp.Association != AssocTargetPort || rtp.Type != DesignatorRelativeTargetPort {
		t.Errorf("relative target port %+v", rtp)
	}
	if got := id.WWID(); got != "naa.6001405123456789abcdef0123456789" {
		t.Errorf("WWID() = %q", got)
	}
	if got := id.Designators[1].String(); got != "t10.LIO-ORG file0           12345678-9abc-4def-8012\\0" {
		t.Errorf("T10 String() = %q", got)
	}
	if got := id.Designators[5].String(); got != "iqn.2025-01.t:1,t,0x0001" {
		t.Errorf("SCSI name String() = %q", got)
	}
	// Value is a copy.
	b[8] = 0xff
	if naa.Value[0] != 0x60 {
		t.Error("Designator.Value aliases the input")
	}
	b[8] = 0x60
	if m := id.Marshal(); !bytes.Equal(m, b) {
		t.Errorf("Marshal\ngot  % x\nwant % x", m, b)
	}
}

func TestLogicalUnitNamePreference(t *testing.T) {
	naa6 := Designator{Type: DesignatorNAA, CodeSet: CodeSetBinary, Value: h(t, "60 01 40 50 00 00 00 00 00 00 00 00 00 00 00 01")}
	naa5 := Designator{Type: DesignatorNAA, CodeSet: CodeSetBinary, Value: h(t, "50 01 40 50 00 00 00 02")}
	naa3 := Designator{Type: DesignatorNAA, CodeSet: CodeSetBinary, Value: h(t, "30 00 00 01 00 00 00 01")}
	naaBadLen := Designator{Type: DesignatorNAA, Value: h(t, "60 01 40 50")}
	eui8 := Designator{Type: DesignatorEUI64, Value: h(t, "00 11 22 33 44 55 66 77")}
	eui16 := Designator{Type: DesignatorEUI64, Value: h(t, "00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff")}
	name := Designator{Type: DesignatorSCSIName, CodeSet: CodeSetUTF8, Value: []byte("naa.6001405f00000000\x00\x00\x00\x00")}
	t10 := Designator{Type: DesignatorT10VendorID, CodeSet: CodeSetASCII, Value: []byte("IET     00010001")}
	portNAA := naa6
	portNAA.Association = AssocTargetPort
	tests := []struct {
		name string
		in   []Designator
		want string
	}{
		{"NAA 6 over NAA 3 and T10 (tgt)", []Designator{t10, naa3, naa6}, "naa.60014050000000000000000000000001"},
		{"NAA 5 over NAA 3", []Designator{naa3, naa5}, "naa.5001405000000002"},
		{"NAA 3 over EUI-64", []Designator{eui16, naa3}, "naa.3000000100000001"},
		{"longer EUI-64", []Designator{eui8, eui16}, "eui.00112233445566778899aabbccddeeff"},
		{"bad NAA length skipped", []Designator{naaBadLen, eui8}, "eui.0011223344556677"},
		{"SCSI name over T10", []Designator{t10, name}, "naa.6001405f00000000"},
		{"T10 alone", []Designator{t10}, "t10.IET     00010001"},
		{"target port designators ignored", []Designator{portNAA, t10}, "t10.IET     00010001"},
		{"nothing", []Designator{portNAA}, ""},
	}
	for _, tt := range tests {
		id := DeviceIdentification{Designators: tt.in}
		if got := id.WWID(); got != tt.want {
			t.Errorf("%s: WWID() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestEscapeNonPrintable(t *testing.T) {
	d := Designator{Type: DesignatorT10VendorID, Value: []byte("A\x00\t\x1b\x7f\xff ")}
	if got, want := d.String(), `t10.A\0\t\e\177\377 `; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	u := Designator{Type: DesignatorUUID, Value: []byte{0x10, 0xab}}
	if got := u.String(); got != "type10.10ab" {
		t.Errorf("UUID String() = %q", got)
	}
}

func TestParseDeviceIdentificationErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"descriptor header cut", "00 83 00 06 01 03 00 00 01 03"},
		{"designator past page", "00 83 00 08 01 03 00 08 60 01 40 50"},
	}
	for _, tt := range tests {
		if _, err := ParseDeviceIdentification(h(t, tt.in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tt.name, err)
		}
	}
	id, err := ParseDeviceIdentification(h(t, "00 83 00 00"))
	if err != nil || len(id.Designators) != 0 || id.WWID() != "" {
		t.Errorf("empty page: %+v, %v", id, err)
	}
}
