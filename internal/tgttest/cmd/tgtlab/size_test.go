package main

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64M": 64 << 20, "1g": 1 << 30, "3T": 3 << 40, "8K": 8192} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "-1M", "0", "1.5G", "1X"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
