package scsi

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseInquiry(t *testing.T) {
	// LIO fileio LUN, 36 bytes as Linux asks for them first.
	lio := h(t, `00 00 05 12 1f 00 00 02  4c 49 4f 2d 4f 52 47 20
		66 69 6c 65 30 20 20 20  20 20 20 20 20 20 20 20
		34 2e 30 00`)
	got, err := ParseInquiry(lio)
	if err != nil {
		t.Fatal(err)
	}
	want := InquiryData{
		Version: 5, HiSup: true, ResponseDataFormat: 2, CmdQue: true,
		Vendor: "LIO-ORG", Product: "file0", Revision: "4.0",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if !got.Connected() || got.DeviceType != TypeDisk {
		t.Error("LIO disk not Connected")
	}
}

func TestParseInquiryFlags(t *testing.T) {
	b := h(t, `7f 80 06 32 45 fd 50 02  56 45 4e 44 4f 52 00 00
		50 52 4f 44 20 20 20 20  20 20 20 20 20 20 20 20
		52 45 56 31 00 00 00 00  00 00 00 00 00 00 00 00
		00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00
		00 00 04 c0 00 00 09 60  00 00 00 00 00 00 00 00
		00 00`)
	got, err := ParseInquiry(b)
	if err != nil {
		t.Fatal(err)
	}
	want := InquiryData{
		PeripheralQualifier: QualifierNoLU, DeviceType: TypeNoDevice, Removable: true, Version: 6,
		NormACA: true, HiSup: true, ResponseDataFormat: 2, SCCS: true, ACC: true, TPGS: 3,
		ThirdPartyCopy: true, Protect: true, EncServ: true, MultiP: true, CmdQue: true,
		Vendor: "VENDOR", Product: "PROD", Revision: "REV1",
		VersionDescriptors: []uint16{0x04c0, 0x0960},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if got.Connected() {
		t.Error("qualifier 3 reported Connected")
	}
	again, err := ParseInquiry(got.Marshal())
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("round trip: %+v, %v", again, err)
	}
}

func TestParseInquiryShort(t *testing.T) {
	if _, err := ParseInquiry(h(t, "00 00 05 02")); !errors.Is(err, ErrShortData) {
		t.Errorf("4 bytes: %v, want ErrShortData", err)
	}
	// A short reply still yields what arrived.
	got, err := ParseInquiry(h(t, "00 00 05 02 1f 00 00 02 41 42 43"))
	if err != nil || got.Vendor != "ABC" || !got.CmdQue || got.Product != "" {
		t.Errorf("11 bytes: %+v, %v", got, err)
	}
	// ADDITIONAL LENGTH 0 hides the version descriptors but not the strings.
	b := (&InquiryData{Vendor: "V", Product: "P", VersionDescriptors: []uint16{0x0960}}).Marshal()
	b[4] = 0
	got, err = ParseInquiry(b)
	if err != nil || got.Vendor != "V" || got.Product != "P" || got.VersionDescriptors != nil {
		t.Errorf("additional length 0: %+v, %v", got, err)
	}
}

func TestDeviceTypeString(t *testing.T) {
	for typ, want := range map[DeviceType]string{TypeDisk: "disk", TypeStorageArray: "controller", 0x11: "device type 0x11"} {
		if typ.String() != want {
			t.Errorf("%d: %q, want %q", typ, typ.String(), want)
		}
	}
}
