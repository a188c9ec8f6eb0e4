package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/testnet"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// These tests check what an operator reads when a login fails: a hint
// where one helps, and logs that are one format, with units.

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// jsonLines parses every line of stderr as a JSON object.
func jsonLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stderr line is not JSON: %q\n%s", line, stderr)
		}
		out = append(out, m)
	}
	return out
}

// TestCLIHintNoLoginResponse: a portal that accepts the connection and
// never answers the login is reported as such, with the timeout, not as a
// context error; for info and for discover.
func TestCLIHintNoLoginResponse(t *testing.T) {
	addr := testnet.SilentListener(t)
	for _, args := range [][]string{
		{"info", "--portal", addr, "--target", "iqn.2026-11.test:silent", "--login-timeout", "1500ms"},
		{"discover", "--timeout", "1500ms", addr},
	} {
		_, errs, err := run(t, nil, args...)
		if err == nil {
			t.Fatalf("%s against a silent portal succeeded", args[0])
		}
		last := lastLine(errs)
		if want := "no login response from " + addr + " within 1.5s"; !strings.Contains(last, want) {
			t.Errorf("%s: last line %q, want it to say %q", args[0], last, want)
		}
		if strings.Contains(errs, "deadline exceeded") {
			t.Errorf("%s: stderr speaks of a deadline:\n%s", args[0], errs)
		}
	}
}

// TestCLIHintCHAPRequired: a target that wants CHAP, logged in to
// without credentials, fails with a pointer to the CHAP flags; with wrong
// credentials the hint would mislead and is not given.
func TestCLIHintCHAPRequired(t *testing.T) {
	const iqn = "iqn.2026-11.test:chap-hint"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn, CHAP: &tgttest.CHAP{User: "u1", Secret: "goodsecret123"}})
	_, errs, err := run(t, nil, "info", "--portal", srv.Portal(), "--target", iqn, "--transport", "tcp")
	if err == nil {
		t.Fatal("login without credentials succeeded")
	}
	last := lastLine(errs)
	for _, want := range []string{"authentication failed", "--chap-user", "--chap-secret-file"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("wrongsecret12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs, err = run(t, nil, "info", "--portal", srv.Portal(), "--target", iqn, "--transport", "tcp",
		"--chap-user", "u1", "--chap-secret-file", secret)
	if err == nil {
		t.Fatal("login with a wrong secret succeeded")
	}
	if last := lastLine(errs); !strings.Contains(last, "authentication failed") || strings.Contains(last, "--chap-user") {
		t.Errorf("wrong secret: last line %q, want authentication failed without the no-credentials hint", last)
	}
}

// TestCLIHintACL: a login tgtd refuses because its ACL does not admit
// the initiator, or because no target has that name (tgt answers both
// with 02/03, "target not found"), names the initiator and says how the
// ACL admits it.
func TestCLIHintACL(t *testing.T) {
	const iqn = "iqn.2026-11.test:acl-hint"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"--mode", "target", "--op", "unbind", "--tid", "1", "--initiator-address", "ALL"},
		{"--mode", "target", "--op", "bind", "--tid", "1", "--initiator-name", "iqn.2026-11.test:someone-else"},
	} {
		if _, err := srv.Tgtadm(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, target := range []string{iqn, "iqn.2026-11.test:no-such-target"} {
		_, errs, err := run(t, nil, "info", "--portal", srv.Portal(), "--target", target, "--transport", "tcp")
		if err == nil {
			t.Fatalf("login to %s succeeded", target)
		}
		last := lastLine(errs)
		for _, want := range []string{
			"login to " + target + " at " + srv.Portal() + ": login rejected: target not found (status class 0x02 detail 0x03)",
			"no target " + target + " for initiator " + initiatorIQN,
			"targetcli /iscsi/" + target + "/tpg1/acls create " + initiatorIQN,
			"--initiator-name " + initiatorIQN,
		} {
			if !strings.Contains(last, want) {
				t.Errorf("%s: last line %q lacks %q", target, last, want)
			}
		}
	}
	// Admitted by name, the same initiator logs in.
	if _, err := srv.Tgtadm(ctx, "--mode", "target", "--op", "bind", "--tid", "1", "--initiator-name", initiatorIQN); err != nil {
		t.Fatal(err)
	}
	if _, errs, err := run(t, nil, "info", "--portal", srv.Portal(), "--target", iqn, "--transport", "tcp"); err != nil {
		t.Fatalf("login once the ACL admits us: %v\n%s", err, errs)
	}
}

// TestCLIHintNoRDMA: --transport iser on a host without an RDMA device
// says how to list and set one up. (This host has none; a binary built
// without cgo says so too.)
func TestCLIHintNoRDMA(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		if ents, _ := os.ReadDir("/sys/class/infiniband"); len(ents) > 0 {
			t.Skip("this host has an RDMA device")
		}
	}
	_, errs, err := run(t, nil, "info", "--portal", "127.0.0.1:1", "--target", "iqn.2026-11.test:x", "--transport", "iser")
	if err == nil {
		t.Fatal("--transport iser without an RDMA device succeeded")
	}
	last := lastLine(errs)
	for _, want := range []string{"iser-attach rdma list", "iser-attach rdma setup", "--transport tcp"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
}

// TestCLILogFormats: with --log-format json every stderr line is a JSON
// object, the final error included, timestamps carry milliseconds, a
// skipped portal is a warning with its reason, and auto mode's transport
// choice is one short info line. The console format shows milliseconds.
func TestCLILogFormats(t *testing.T) {
	srv := tgttest.Start(t)
	silent := testnet.SilentListener(t)

	// A failing command: the final error is a JSON line too.
	_, errs, err := run(t, nil, "--log-format", "json", "info", "--portal", silent, "--target", srv.IQN(), "--login-timeout", "1s")
	if err == nil {
		t.Fatal("info against a silent portal succeeded")
	}
	lines := jsonLines(t, errs)
	final := lines[len(lines)-1]
	if final["level"] != "error" || !strings.Contains(final["message"].(string), "no login response from "+silent+" within 1s") ||
		final["exit_code"] != float64(1) {
		t.Errorf("final line %v", final)
	}
	ms := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$`)
	for _, l := range lines {
		if ts, _ := l["time"].(string); !ms.MatchString(ts) {
			t.Errorf("timestamp %q lacks milliseconds", l["time"])
		}
	}

	// A usage error, found before the logger is set up: JSON too.
	for _, args := range [][]string{{"--log-format", "json", "info", "--bogus"}, {"info", "--log-format=json", "--bogus"}} {
		_, errs, err = run(t, nil, args...)
		if err == nil {
			t.Fatalf("%v succeeded", args)
		}
		if l := jsonLines(t, errs); len(l) != 1 || l[0]["exit_code"] != float64(2) || !strings.Contains(l[0]["message"].(string), "bogus") {
			t.Errorf("%v: stderr %s", args, errs)
		}
	}

	// Two portals, the first silent: two paths; the silent one is a
	// warning (tried again in the background), the second logs in; the
	// transport choice is one info line per portal.
	_, errs, err = run(t, nil, "--log-format", "json", "info", "--portal", silent, "--portal", srv.Portal(),
		"--target", srv.IQN(), "--lun", "1", "--login-timeout", "1s")
	if err != nil {
		t.Fatalf("info over a silent and a good portal: %v\n%s", err, errs)
	}
	skipped, chosen := 0, map[string]int{}
	for _, l := range jsonLines(t, errs) {
		switch l["message"] {
		case "path down at login: retrying in the background":
			skipped++
			if l["level"] != "warn" || l["portal"] != silent || !strings.Contains(l["error"].(string), "no login response") {
				t.Errorf("skipped portal line %v", l)
			}
		case "logged in: one path per portal":
			if l["up"] != float64(1) {
				t.Errorf("login line %v: want up 1 (the silent path is down)", l)
			}
		case "transport chosen":
			chosen[l["portal"].(string)]++
			if l["level"] != "info" || len(l["reason"].(string)) > 60 {
				t.Errorf("transport line %v: want info and a short reason", l)
			}
		}
	}
	if skipped != 1 || chosen[silent] != 1 || chosen[srv.Portal()] != 1 {
		t.Errorf("%d skipped-portal lines, transport lines %v:\n%s", skipped, chosen, errs)
	}

	// discover over the same two portals: the silent one is a warning, the
	// targets of the other are printed.
	out, errs, _ := run(t, nil, "--log-format", "json", "discover", "--timeout", "1s", "--portal", silent, "--portal", srv.Portal())
	skipped = 0
	for _, l := range jsonLines(t, errs) {
		if l["message"] == "portal skipped" && l["level"] == "warn" && l["portal"] == silent &&
			strings.Contains(l["error"].(string), "no login response") {
			skipped++
		}
	}
	if skipped != 1 || !strings.Contains(out, srv.IQN()) {
		t.Errorf("discover over a silent and a good portal: %d skipped-portal lines, output:\n%s\nstderr:\n%s", skipped, out, errs)
	}

	// Console format: HH:MM:SS.mmm.
	_, errs, err = run(t, nil, "info", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1")
	if err != nil {
		t.Fatalf("info: %v\n%s", err, errs)
	}
	console := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d\.\d{3} INF `)
	if !console.MatchString(errs) {
		t.Errorf("console lines lack millisecond timestamps:\n%s", errs)
	}
}

// TestCLICHAPFallbackIsDebug: against tgt, whose CHAP_A=7 means SHA-1,
// the fallback to other algorithms is one debug line, not shown at the
// default level.
func TestCLICHAPFallbackIsDebug(t *testing.T) {
	const iqn = "iqn.2026-11.test:chap-debug"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn, CHAP: &tgttest.CHAP{User: "u1", Secret: "goodsecret123"}})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("goodsecret123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"info", "--portal", srv.Portal(), "--target", iqn, "--lun", "1", "--transport", "tcp",
		"--chap-user", "u1", "--chap-secret-file", secret}
	count := func(level string) (n int) {
		t.Helper()
		_, errs, err := run(t, nil, append([]string{"--log-format", "json", "--log-level", level}, args...)...)
		if err != nil {
			t.Fatalf("info with CHAP: %v\n%s", err, errs)
		}
		for _, l := range jsonLines(t, errs) {
			if strings.Contains(l["message"].(string), "CHAP") {
				n++
				if l["level"] != "debug" {
					t.Errorf("CHAP line at %v: %v", l["level"], l)
				}
			}
		}
		return n
	}
	if n := count("info"); n != 0 {
		t.Errorf("%d CHAP lines at level info", n)
	}
	if n := count("debug"); n != 1 {
		t.Errorf("%d CHAP lines at level debug, want 1", n)
	}
}

// TestCLIJSONWarnings: the warnings commands print on stderr (here about
// a world-readable secret file) are JSON lines too with --log-format json.
func TestCLIJSONWarnings(t *testing.T) {
	const iqn = "iqn.2026-11.test:chap-json"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn, CHAP: &tgttest.CHAP{User: "u1", Secret: "goodsecret123"}})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("goodsecret123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, err := run(t, nil, "--log-format", "json", "info", "--portal", srv.Portal(), "--target", iqn, "--lun", "1",
		"--chap-user", "u1", "--chap-secret-file", secret)
	if err != nil {
		t.Fatalf("info: %v\n%s", err, errs)
	}
	warned := false
	for _, l := range jsonLines(t, errs) {
		if strings.Contains(l["message"].(string), "world-readable") {
			warned = l["level"] == "warn"
		}
	}
	if !warned {
		t.Errorf("no warn line about the world-readable secret file:\n%s", errs)
	}
}
