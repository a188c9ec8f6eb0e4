package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestLogFieldFormats: durations print with their unit in both formats,
// and the console format keeps a timestamp's milliseconds.
func TestLogFieldFormats(t *testing.T) {
	at := time.Date(2026, 11, 24, 10, 20, 30, 123_000_000, time.UTC)
	old := zerolog.TimestampFunc
	zerolog.TimestampFunc = func() time.Time { return at }
	t.Cleanup(func() { zerolog.TimestampFunc = old })

	var js bytes.Buffer
	l := zerolog.New(&js).With().Timestamp().Logger()
	l.Info().Dur("retry_in", 250*time.Millisecond).Dur("replacement_timeout", 2*time.Minute).Msg("x")
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["retry_in"] != "250ms" || m["replacement_timeout"] != "2m0s" || m["time"] != "2026-11-24T10:20:30.123Z" {
		t.Errorf("json line %s", js.String())
	}

	var con bytes.Buffer
	l = zerolog.New(zerolog.ConsoleWriter{Out: &con, TimeFormat: "15:04:05.000", NoColor: true, TimeLocation: time.UTC}).
		With().Timestamp().Logger()
	l.Info().Dur("retry_in", 250*time.Millisecond).Msg("x")
	if got := con.String(); !strings.HasPrefix(got, "10:20:30.123 INF") || !strings.Contains(got, "retry_in=250ms") {
		t.Errorf("console line %q", got)
	}
}

// TestFinalMessage: the final error is one line; joined errors (one per
// portal) stay apart.
func TestFinalMessage(t *testing.T) {
	err := errors.Join(errors.New("login to t at a: no login response from a within 1s"),
		errors.New("login to t at b:  refused\n"))
	if got, want := finalMessage(err), "login to t at a: no login response from a within 1s; login to t at b: refused"; got != want {
		t.Errorf("finalMessage = %q, want %q", got, want)
	}
}

// TestJournalWriter: under journald every line carries its level's
// sd-daemon prefix, in both formats, each line of a message of several
// lines included.
func TestJournalWriter(t *testing.T) {
	var js bytes.Buffer
	l := zerolog.New(newJournalWriter(&js, nil)).Level(zerolog.TraceLevel)
	l.Debug().Msg("d")
	l.Info().Msg("i")
	l.Warn().Msg("w")
	l.Error().Msg("e")
	l.Log().Msg("n")
	lines := strings.Split(strings.TrimSuffix(js.String(), "\n"), "\n")
	want := []string{"<7>", "<6>", "<4>", "<3>", "<5>"}
	if len(lines) != len(want) {
		t.Fatalf("json lines %q", lines)
	}
	for i, line := range lines {
		if !strings.HasPrefix(line, want[i]+"{") {
			t.Errorf("json line %d = %q, want prefix %s", i, line, want[i])
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, want[i])), &m); err != nil {
			t.Errorf("json line %d after its prefix: %v", i, err)
		}
	}

	var con bytes.Buffer
	l = zerolog.New(newJournalWriter(&con, &zerolog.ConsoleWriter{NoColor: true, PartsExclude: []string{zerolog.TimestampFieldName}}))
	l.Warn().Msg("first\nsecond")
	l.Info().Str("k", "v").Msg("plain")
	if got, want := con.String(), "<4>WRN first\n<4>second\n<6>INF plain k=v\n"; got != want {
		t.Errorf("console lines %q, want %q", got, want)
	}
}

// TestUnderJournal: JOURNAL_STREAM counts only when it names stderr's
// device and inode.
func TestUnderJournal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	match := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	other := fmt.Sprintf("%d:%d", st.Dev, st.Ino+1)
	for _, c := range []struct {
		env  string
		want bool
	}{{match, true}, {other, false}, {"", false}, {"x:y", false}, {fmt.Sprint(st.Dev), false}} {
		if got := underJournal(c.env, f); got != c.want {
			t.Errorf("underJournal(%q) = %v, want %v", c.env, got, c.want)
		}
	}
}

// TestCLIJournalStream: the binary prefixes its lines when stderr is the
// stream JOURNAL_STREAM names, in both formats, and not when stderr is
// another file.
func TestCLIJournalStream(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		f, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		for _, stream := range []string{fmt.Sprintf("%d:%d", st.Dev, st.Ino), fmt.Sprintf("%d:%d", st.Dev, st.Ino+1)} {
			if err := f.Truncate(0); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(binary, "--log-format", format, "--log-level", "debug", "discover", "--timeout", "1s", "127.0.0.1:1")
			cmd.Env = append(os.Environ(), "JOURNAL_STREAM="+stream)
			cmd.Stderr = f
			if err := cmd.Run(); err == nil {
				t.Fatalf("discover of a closed port succeeded")
			}
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
			last := lines[len(lines)-1]
			journal := stream == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
			if journal != strings.HasPrefix(last, "<3>") {
				t.Errorf("%s, journal %v: final line %q", format, journal, last)
			}
			for _, line := range lines {
				if journal != strings.HasPrefix(line, "<") {
					t.Errorf("%s, journal %v: line %q", format, journal, line)
				}
			}
		}
		f.Close()
	}
}
