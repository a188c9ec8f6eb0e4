package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/b-*.json are real fio 3.33 runs (ioengine=nbd) against qemu-nbd
// serving a tgtd LUN through libiscsi; b-randread.json still carries the
// nbd engine's "fio: connected to NBD server" line before the JSON.
func TestParseCapturedRuns(t *testing.T) {
	data, err := os.ReadFile("testdata/b-randread.json")
	if err != nil {
		t.Fatal(err)
	}
	j, err := parseFio(data)
	if err != nil {
		t.Fatal(err)
	}
	if j.Read.IOPS != 12279.480346 || j.Read.TotalIOs != 36863 || p99(j.Read) != 8.978432 {
		t.Errorf("randread: iops %v, ios %d, p99 %v ms", j.Read.IOPS, j.Read.TotalIOs, p99(j.Read))
	}
}

func TestTable(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"randread", "randwrite", "seqread"} {
		data, err := os.ReadFile(filepath.Join("testdata", "b-"+f+".json"))
		if err != nil {
			t.Fatal(err)
		}
		// a is b for randread and seqread; a has no randwrite result.
		sides := []string{"b"}
		if f != "randwrite" {
			sides = append(sides, "a")
		}
		for _, side := range sides {
			if err := os.WriteFile(filepath.Join(dir, side+"-"+f+".json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var b strings.Builder
	if err := writeTable(&b, dir, "iser-attach", "qemu-nbd"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"4k randread QD32", "IOPS", "12279.5", "12279.5", "1.00", "8.98"},
		{"4k randwrite QD32", "IOPS", "-", "7925.7", "-"},
		{"1M seqread QD8", "MB/s", "208.0", "208.0", "1.00"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
}

func TestBrokenResult(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a-randread.json"), []byte(`{"jobs":[{"jobname":"x","error":5}]}`), 0o644)
	var b strings.Builder
	if err := writeTable(&b, dir, "a", "b"); err == nil || !strings.Contains(err.Error(), "error 5") {
		t.Errorf("fio job error not reported: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "a-randread.json"), []byte("fio: connected\nnot json"), 0o644)
	if err := writeTable(&b, dir, "a", "b"); err == nil {
		t.Error("garbage accepted")
	}
}
