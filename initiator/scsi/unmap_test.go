package scsi

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestUnmapParameterList(t *testing.T) {
	// sg_unmap --lba=5,0x100000000 --num=7,0x20 -vvvv printed this list.
	descs := []UnmapDescriptor{{LBA: 5, Blocks: 7}, {LBA: 0x100000000, Blocks: 0x20}}
	want := h(t, `00 26 00 20 00 00 00 00  00 00 00 00 00 00 00 05
		00 00 00 07 00 00 00 00  00 00 00 01 00 00 00 00
		00 00 00 20 00 00 00 00`)
	got, err := UnmapParameterList(descs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got  % x\nwant % x", got, want)
	}
	c := Unmap(uint16(len(got)), false)
	if !bytes.Equal(c.Bytes(), h(t, "42 00 00 00 00 00 00 00 28 00")) {
		t.Errorf("UNMAP CDB % x", c.Bytes())
	}
	back, err := ParseUnmapParameterList(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, descs) {
		t.Errorf("round trip %v, want %v", back, descs)
	}
}

func TestUnmapParameterListLimits(t *testing.T) {
	empty, err := UnmapParameterList(nil)
	if err != nil || !bytes.Equal(empty, h(t, "00 06 00 00 00 00 00 00")) {
		t.Errorf("empty list % x, %v", empty, err)
	}
	max := make([]UnmapDescriptor, MaxUnmapDescriptors)
	b, err := UnmapParameterList(max)
	if err != nil || len(b) > 0xffff {
		t.Errorf("max descriptors: len %d, %v", len(b), err)
	}
	if _, err := UnmapParameterList(make([]UnmapDescriptor, MaxUnmapDescriptors+1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("too many descriptors: %v, want ErrMalformed", err)
	}
}

func TestParseUnmapParameterListErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"short header", "00 06 00 00", ErrShortData},
		{"odd descriptor length", "00 0e 00 08 00 00 00 00 00 00 00 00 00 00 00 00", ErrMalformed},
		{"data length too small", "00 05 00 10 00 00 00 00", ErrMalformed},
		{"descriptors missing", "00 16 00 10 00 00 00 00 00 00", ErrShortData},
	}
	for _, tt := range tests {
		if _, err := ParseUnmapParameterList(h(t, tt.in)); !errors.Is(err, tt.want) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
	}
}
