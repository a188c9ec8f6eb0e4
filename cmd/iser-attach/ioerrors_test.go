package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestIOErrorLog: every failed I/O is logged with its cause, at most a
// burst per second; what is held back is counted in the next line.
func TestIOErrorLog(t *testing.T) {
	var buf bytes.Buffer
	l := newIOErrorLog(zerolog.New(&buf))
	l.burst = 2
	for i := 0; i < 5; i++ {
		l.report("write", int64(i)*4096, 4096, errors.New("target failure"))
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"op":"write"`) || !strings.Contains(lines[0], `"error":"target failure"`) ||
		!strings.Contains(lines[1], `"offset":4096`) {
		t.Fatalf("log:\n%s", buf.String())
	}
	if l.suppressed != 3 {
		t.Fatalf("suppressed %d, want 3", l.suppressed)
	}
	l.window = l.window.Add(-2e9) // a second later
	buf.Reset()
	l.report("read", 0, 512, errors.New("eio"))
	if !strings.Contains(buf.String(), `"suppressed":3`) {
		t.Fatalf("the next line does not count the held back ones: %s", buf.String())
	}
}
