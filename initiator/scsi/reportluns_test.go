package scsi

import (
	"bytes"
	"errors"
	"testing"
)

func TestParseReportLUNs(t *testing.T) {
	r, err := ParseReportLUNs(h(t, `00 00 00 18 00 00 00 00
		00 00 00 00 00 00 00 00
		00 05 00 00 00 00 00 00
		41 00 00 00 00 00 00 00`))
	if err != nil {
		t.Fatal(err)
	}
	if r.ListLength != 24 || r.Truncated || len(r.LUNs) != 3 {
		t.Fatalf("got %+v", r)
	}
	for i, want := range []uint16{0, 5, 256} {
		if d := DecodeLUN(r.LUNs[i]); !d.Simple || d.Number != want {
			t.Errorf("LUN %d = %v, want %d", i, d, want)
		}
	}
	if r.AllocationLength() != 32 {
		t.Errorf("AllocationLength() = %d", r.AllocationLength())
	}
	// Marshal reproduces the input.
	if got := r.Marshal(); !bytes.Equal(got, h(t, `00 00 00 18 00 00 00 00 00 00 00 00 00 00 00 00
		00 05 00 00 00 00 00 00 41 00 00 00 00 00 00 00`)) {
		t.Errorf("Marshal() = % x", got)
	}
}

func TestParseReportLUNsTruncated(t *testing.T) {
	// The list says 3 LUNs; the allocation length let 1.5 arrive.
	r, err := ParseReportLUNs(h(t, "00 00 00 18 00 00 00 00 00 00 00 00 00 00 00 00 00 05 00 00"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || len(r.LUNs) != 1 || r.AllocationLength() != 32 {
		t.Errorf("got %+v, AllocationLength %d", r, r.AllocationLength())
	}
	// More bytes than the list length (padding) are ignored.
	r, err = ParseReportLUNs(h(t, "00 00 00 08 00 00 00 00 00 01 00 00 00 00 00 00 ff ff ff ff ff ff ff ff"))
	if err != nil || r.Truncated || len(r.LUNs) != 1 {
		t.Errorf("padded: %+v, %v", r, err)
	}
	// An empty list still asks for the 16-byte minimum allocation.
	r, err = ParseReportLUNs(h(t, "00 00 00 00 00 00 00 00"))
	if err != nil || len(r.LUNs) != 0 || r.AllocationLength() != 16 {
		t.Errorf("empty: %+v, %v", r, err)
	}
}

func TestParseReportLUNsErrors(t *testing.T) {
	if _, err := ParseReportLUNs(h(t, "00 00 00 08 00 00 00")); !errors.Is(err, ErrShortData) {
		t.Errorf("short header: %v", err)
	}
	if _, err := ParseReportLUNs(h(t, "00 00 00 0c 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")); !errors.Is(err, ErrMalformed) {
		t.Errorf("odd list length: %v", err)
	}
}
