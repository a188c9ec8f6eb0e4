package scsi

import (
	"bytes"
	"errors"
	"testing"
)

func TestParseModeSense6Caching(t *testing.T) {
	// tgt, MODE SENSE(6) page 8 with DBD (testdata/tgt/modesense6-caching.data).
	m, err := ParseModeSense6(h(t, "17 00 10 00 08 12 14 00 ff ff 00 00 ff ff ff ff 80 14 00 00 00 00 00 00"))
	if err != nil {
		t.Fatal(err)
	}
	if m.WriteProtected() || !m.DPOFUA() || m.Truncated || len(m.BlockDescriptors) != 0 || len(m.Pages) != 1 {
		t.Fatalf("got %+v", m)
	}
	p, ok := m.Page(ModePageCaching, 0)
	if !ok || len(p.Data) != 0x12 {
		t.Fatalf("caching page %+v, %v", p, ok)
	}
	c, err := ParseCachingPage(p)
	if err != nil || c != (CachingPage{DISC: true, WCE: true}) {
		t.Errorf("caching %+v, %v", c, err)
	}
}

func TestParseModeSense10WriteProtect(t *testing.T) {
	// Write protected, LONGLBA, one 16-byte block descriptor, caching page
	// with RCD, a sub_page format page.
	b := h(t, `00 2c 00 80 01 00 00 10
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 10 00
		88 0a 01 00 00 00 00 00 00 00 00 00
		4a 01 00 02 aa bb`)
	m, err := ParseModeSense10(b)
	if err != nil {
		t.Fatal(err)
	}
	if !m.WriteProtected() || m.DPOFUA() || !m.LongLBA || len(m.BlockDescriptors) != 16 || len(m.Pages) != 2 {
		t.Fatalf("got %+v", m)
	}
	c, err := ParseCachingPage(m.Pages[0])
	if err != nil || c != (CachingPage{RCD: true}) || !m.Pages[0].PS {
		t.Errorf("caching %+v, %v, page %+v", c, err, m.Pages[0])
	}
	sp, ok := m.Page(ModePageControlMode, 1)
	if !ok || !sp.SPF || !bytes.Equal(sp.Data, []byte{0xaa, 0xbb}) {
		t.Errorf("subpage %+v, %v", sp, ok)
	}
	b[8] = 0xee
	if m.BlockDescriptors[0] != 0 {
		t.Error("BlockDescriptors aliases the input")
	}
}

func TestParseModeSenseTruncated(t *testing.T) {
	// tgt, all pages with allocation length 24 (testdata/tgt/modesense6-all-short.data):
	// MODE DATA LENGTH says 106 bytes.
	m, err := ParseModeSense6(h(t, "69 00 10 08 00 00 00 00 00 00 02 00 00 00 02 0e 80 80 00 0a 00 00 00 00"))
	if err != nil {
		t.Fatal(err)
	}
	// tgt sends an empty page 0 first; page 2 is cut off.
	if !m.Truncated || len(m.Pages) != 1 || m.Pages[0].Code != 0 || len(m.BlockDescriptors) != 8 {
		t.Errorf("got %+v", m)
	}
	// Truncated inside the block descriptors.
	m, err = ParseModeSense10(h(t, "00 40 00 00 00 00 00 08 00 00"))
	if err != nil || !m.Truncated || m.BlockDescriptors != nil {
		t.Errorf("cut block descriptors: %+v, %v", m, err)
	}
}

func TestParseModeSenseErrors(t *testing.T) {
	tests := []struct {
		name string
		f    func([]byte) (ModeParameters, error)
		in   string
		want error
	}{
		{"6 short header", ParseModeSense6, "03 00 00", ErrShortData},
		{"10 short header", ParseModeSense10, "00 06 00 00 00 00 00", ErrShortData},
		{"6 length below header", ParseModeSense6, "01 00 00 00", ErrMalformed},
		{"6 block descriptors past data", ParseModeSense6, "07 00 00 08 00 00 00 00", ErrMalformed},
		{"6 page past data", ParseModeSense6, "07 00 00 00 08 12 00 00", ErrMalformed},
		{"10 subpage header past data", ParseModeSense10, "00 08 00 00 00 00 00 00 4a 01", ErrMalformed},
	}
	for _, tt := range tests {
		if _, err := tt.f(h(t, tt.in)); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := ParseCachingPage(ModePage{Code: ModePageControlMode, Data: []byte{0}}); !errors.Is(err, ErrMalformed) {
		t.Errorf("caching from control page: %v", err)
	}
	if _, err := ParseCachingPage(ModePage{Code: ModePageCaching}); !errors.Is(err, ErrShortData) {
		t.Errorf("empty caching page: %v", err)
	}
	if _, err := ParseControlPage(ModePage{Code: ModePageControlMode, Data: []byte{0, 0, 0}}); !errors.Is(err, ErrShortData) {
		t.Errorf("short control page: %v", err)
	}
}

func TestParseControlPage(t *testing.T) {
	// tgt, MODE SENSE(6) control page (testdata/tgt/modesense6-control.data).
	m, err := ParseModeSense6(h(t, "0f 00 10 00 0a 0a 02 10 00 00 00 00 00 00 02 00"))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := m.Page(ModePageControlMode, 0)
	if !ok {
		t.Fatalf("no control page in %+v", m)
	}
	c, err := ParseControlPage(p)
	if err != nil || c != (ControlPage{GLTSD: true, QueueAlgorithmModifier: 1}) {
		t.Errorf("tgt control %+v, %v", c, err)
	}
	all := ModePage{Code: ModePageControlMode, Data: h(t, "f7 1a 78 c0 00 00 01 2c 00 00")}
	c, err = ParseControlPage(all)
	want := ControlPage{TST: 7, TMFOnly: true, DSense: true, GLTSD: true, RLEC: true,
		QueueAlgorithmModifier: 1, NUAR: true, QErr: 1, RAC: true, UAIntlckCtrl: 3, SWP: true,
		ATO: true, TAS: true, BusyTimeoutPeriod: 300}
	if err != nil || c != want {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}
