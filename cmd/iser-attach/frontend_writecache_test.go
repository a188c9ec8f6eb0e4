package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSetQueueWriteCache writes the modes the kernel's write_cache
// attribute takes and reports the mode read back; a missing queue is an
// error and counts as write-through (the LUN then makes writes durable).
func TestSetQueueWriteCache(t *testing.T) {
	queue := t.TempDir()
	p := filepath.Join(queue, "write_cache")
	if err := os.WriteFile(p, []byte("write through\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, wb := range []bool{true, false, true} {
		got, err := setQueueWriteCache(queue, wb)
		if err != nil || got != wb {
			t.Fatalf("set write-back=%v: got %v, %v", wb, got, err)
		}
		b, _ := os.ReadFile(p)
		want := map[bool]string{true: "write back", false: "write through"}[wb]
		if string(b) != want {
			t.Fatalf("write_cache holds %q, want %q", b, want)
		}
	}
	if got, err := setQueueWriteCache(filepath.Join(queue, "gone"), true); err == nil || got {
		t.Fatalf("missing queue: got %v, %v; want an error and write-through", got, err)
	}
}
