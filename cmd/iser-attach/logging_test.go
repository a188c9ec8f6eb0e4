package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
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
