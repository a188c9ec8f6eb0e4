package tgttest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// Start launches a tgtd serving targets (one default target when none are
// given) with command tracing on, and stops it in t.Cleanup. It fails the
// test, with the command that fixes the machine, when tgt is not
// installed or the test does not run as root (tgtd needs /var/run/tgtd).
//
// Cleanups run last-in first-out, so initiators a test opens after Start
// are closed before tgtd goes away.
func Start(t testing.TB, targets ...Target) *Server {
	t.Helper()
	if _, err := lookBin("tgtd"); err != nil {
		t.Fatalf("tgttest: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("tgttest: tgtd needs root (it creates %s); run the tests as root", ipcDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Launch(ctx, Config{Targets: targets, Dir: t.TempDir(), Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tgttest: last lines of tgtd on %s:\n%s", s.Portal(), strings.Join(s.LastLines(), "\n"))
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}
