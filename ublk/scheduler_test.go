package ublk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestActiveScheduler(t *testing.T) {
	for _, c := range []struct {
		in, want string
		bad      bool
	}{
		{in: "none [mq-deadline] kyber\n", want: "mq-deadline"},
		{in: "[none] mq-deadline\n", want: "none"},
		{in: "none\n", want: "none"},
		{in: "mq-deadline kyber [bfq] none", want: "bfq"},
		{in: "", bad: true},
		{in: "none mq-deadline\n", bad: true},
		{in: "[] none mq-deadline", bad: true},
	} {
		got, err := activeScheduler(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("activeScheduler(%q) = %q, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("activeScheduler(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestValidSchedulerName(t *testing.T) {
	for _, n := range []string{"none", "mq-deadline", "kyber", "bfq", "my_sched2"} {
		if !ValidSchedulerName(n) {
			t.Errorf("ValidSchedulerName(%q) = false", n)
		}
	}
	for _, n := range []string{"", "None", "mq deadline", "../x", "none\n", strings.Repeat("a", 33)} {
		if ValidSchedulerName(n) {
			t.Errorf("ValidSchedulerName(%q) = true", n)
		}
	}
}

// A plain file stands in for the attribute: what is written reads back
// bare, as a queue with one choice shows it.
func TestSetScheduler(t *testing.T) {
	q := t.TempDir()
	p := filepath.Join(q, "scheduler")
	if err := os.WriteFile(p, []byte("none [mq-deadline] kyber\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := setScheduler(q, "none"); err != nil || got != "none" {
		t.Fatalf("setScheduler none = %q, %v", got, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "none" {
		t.Fatalf("attribute holds %q, want none", b)
	}
	if _, err := setScheduler(q, "none\nkyber"); err == nil || !strings.Contains(err.Error(), "not a scheduler name") {
		t.Fatalf("a bad name: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "none" {
		t.Fatalf("a bad name was written: %q", b)
	}
}

// The kernel keeps its scheduler when it refuses the name, or when /sys
// is read-only: the error names what is active.
func TestSetSchedulerRefused(t *testing.T) {
	q := t.TempDir()
	if _, err := setScheduler(q, "none"); err == nil {
		t.Fatal("no attribute: want an error")
	}
	// A directory named like the attribute refuses the write and the read.
	if err := os.Mkdir(filepath.Join(q, "scheduler"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := setScheduler(q, "none")
	if err == nil || !strings.Contains(err.Error(), "set ") {
		t.Fatalf("setScheduler on an unwritable attribute = %q, %v; want the write's error", got, err)
	}
}
