package csi

import (
	"errors"
	"strings"
	"testing"
)

func TestParseVolumeID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want VolumeID
		err  string // "" for success
	}{
		{"iser1:1:naa.60000000000000000e00000000010001:iqn.2026-11.test:pool",
			VolumeID{Target: "iqn.2026-11.test:pool", LUN: 1, LUID: "naa.60000000000000000e00000000010001"}, ""},
		{"iser1:0:eui.0123456789abcdef:eui.02004567A425678D",
			VolumeID{Target: "eui.02004567A425678D", LUN: 0, LUID: "eui.0123456789abcdef"}, ""},
		{"iser1:16383:t10.LIO-ORG_disk_1:iqn.a:b:c:d",
			VolumeID{Target: "iqn.a:b:c:d", LUN: 16383, LUID: "t10.LIO-ORG_disk_1"}, ""},
		{"", VolumeID{}, "want iser1:LUN:LUID:TARGET"},
		{"some-volume-id", VolumeID{}, "want iser1:LUN:LUID:TARGET"},
		{"iser2:1:naa.6:iqn.2026-11.test:pool", VolumeID{}, "want iser1:LUN:LUID:TARGET"},
		{"iser1:1:naa.6", VolumeID{}, "want iser1:LUN:LUID:TARGET"},
		{"iser1::naa.6:iqn.2026-11.test:pool", VolumeID{}, "LUN"},
		{"iser1:01:naa.6:iqn.2026-11.test:pool", VolumeID{}, "LUN"},
		{"iser1:16384:naa.6:iqn.2026-11.test:pool", VolumeID{}, "above 16383"},
		{"iser1:+1:naa.6:iqn.2026-11.test:pool", VolumeID{}, "LUN"},
		{"iser1:1:wwn.6:iqn.2026-11.test:pool", VolumeID{}, "LU identity"},
		{"iser1:1:naa.:iqn.2026-11.test:pool", VolumeID{}, "LU identity"},
		{"iser1:1:naa.6 0:iqn.2026-11.test:pool", VolumeID{}, "character ' '"},
		{"iser1:1:naa.6:pool", VolumeID{}, "not an iSCSI name"},
		{"iser1:1:naa.6:iqn.a b", VolumeID{}, "spaces"},
	} {
		got, err := ParseVolumeID(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseVolumeID(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			} else if got.String() != tc.in {
				t.Errorf("ParseVolumeID(%q).String() = %q", tc.in, got.String())
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrBadVolumeID) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseVolumeID(%q) = %+v, %v; want an ErrBadVolumeID with %q", tc.in, got, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseVolumeID(%q): error of several lines: %q", tc.in, err)
		}
	}
}

// FuzzParseVolumeID: no input panics; every ID that parses is written back
// unchanged, and an error is one line wrapping ErrBadVolumeID.
func FuzzParseVolumeID(f *testing.F) {
	for _, s := range []string{
		"iser1:1:naa.60000000000000000e00000000010001:iqn.2026-11.test:pool",
		"iser1:16383:t10.LIO-ORG_disk_1:iqn.a:b:c:d",
		"iser1:0:eui.0123456789abcdef:eui.02004567A425678D",
		"iser1:01:naa.6:iqn.x", "iser1:1:naa.6 0:iqn.x", "iser1::::", "some-volume-id", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVolumeID(s)
		if err != nil {
			if !errors.Is(err, ErrBadVolumeID) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseVolumeID(%q): %v", s, err)
			}
			return
		}
		if v.String() != s {
			t.Fatalf("ParseVolumeID(%q).String() = %q", s, v.String())
		}
		if v2, err := ParseVolumeID(v.String()); err != nil || v2 != v {
			t.Fatalf("round trip of %q: %+v, %v", s, v2, err)
		}
	})
}
