package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestCLIDiscoverPortals: discover takes its portal as PORTAL or --portal
// (both only when equal), and discovers on every --portal given.
func TestCLIDiscoverPortals(t *testing.T) {
	a := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:on-a"})
	b := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:on-b"})
	ok := func(args []string, want ...string) {
		t.Helper()
		out, errs, err := run(t, nil, append([]string{"discover"}, args...)...)
		if err != nil {
			t.Fatalf("discover %q: %v\n%s", args, err, errs)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("discover %q lacks %s:\n%s", args, w, out)
			}
		}
		for _, other := range []string{"iqn.2026-11.test:on-a", "iqn.2026-11.test:on-b"} {
			if !strings.Contains(strings.Join(want, " "), other) && strings.Contains(out, other) {
				t.Fatalf("discover %q lists %s:\n%s", args, other, out)
			}
		}
	}
	fails := func(args []string, want string) {
		t.Helper()
		_, errs, err := run(t, nil, append([]string{"discover"}, args...)...)
		if err == nil || !strings.Contains(errs, want) {
			t.Fatalf("discover %q: %v, want an error with %q:\n%s", args, err, want, errs)
		}
	}
	ok([]string{"--portal", a.Portal()}, "iqn.2026-11.test:on-a", a.Portal())
	ok([]string{a.Portal(), "--portal", a.Portal()}, "iqn.2026-11.test:on-a")
	ok([]string{"--portal", a.Portal(), "--portal", b.Portal()}, "iqn.2026-11.test:on-a", "iqn.2026-11.test:on-b", a.Portal(), b.Portal())
	ok([]string{"--json", "--portal", a.Portal(), "--portal", b.Portal()}, `"target": "iqn.2026-11.test:on-a"`, `"target": "iqn.2026-11.test:on-b"`)
	fails([]string{a.Portal(), "--portal", b.Portal()}, "differ")
	fails([]string{a.Portal(), b.Portal()}, "expected [PORTAL], got 2 arguments")
	fails(nil, "no portal")
}

// TestCLIDiscoverPortalGroupTag: discover takes host:port,TPGT as iscsiadm
// prints it; a tag the target's answer contradicts is warned about (tgtd
// lists its portal in group 1), one it agrees with is not.
func TestCLIDiscoverPortalGroupTag(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:tag"})
	for _, c := range []struct {
		tag  string
		warn bool
	}{{"1", false}, {"7", true}} {
		out, errs, err := run(t, nil, "discover", srv.Portal()+","+c.tag)
		if err != nil || !strings.Contains(out, "iqn.2026-11.test:tag") {
			t.Fatalf("discover %s,%s: %v\n%s%s", srv.Portal(), c.tag, err, out, errs)
		}
		warned := strings.Contains(errs, "WRN portal "+srv.Portal()+","+c.tag+": target iqn.2026-11.test:tag lists it in portal group 1")
		if warned != c.warn {
			t.Fatalf("discover %s,%s: warned %v, want %v:\n%s", srv.Portal(), c.tag, warned, c.warn, errs)
		}
	}
}

// TestCLIDiscoverCHAP: with credentials, discover works on a tgtd that does
// not authenticate discovery and on one that does; without them the
// latter refuses, and the refusal names the initiator.
func TestCLIDiscoverCHAP(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:disc"})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("discsecret123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := []string{"--chap-user", "disc", "--chap-secret-file", secret}
	discover := func(args ...string) (string, string, error) {
		return run(t, nil, append([]string{"discover", "--portal", srv.Portal()}, args...)...)
	}
	if out, errs, err := discover(creds...); err != nil || !strings.Contains(out, "iqn.2026-11.test:disc") {
		t.Fatalf("credentials, portal without discovery CHAP: %v\n%s%s", err, out, errs)
	}
	// Mutual CHAP, which tgt refuses on such a portal: discovered after a
	// retry without authentication, which a warning reports.
	mutual := filepath.Join(t.TempDir(), "mutual")
	if err := os.WriteFile(mutual, []byte("targetsecret9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, err := discover(append(creds, "--mutual-user", "tgt", "--mutual-secret-file", mutual)...)
	if err != nil || !strings.Contains(out, "iqn.2026-11.test:disc") || !strings.Contains(errs, "WRN discovery on "+srv.Portal()+
		" refused our CHAP credentials; retried without authentication, which the portal accepted") {
		t.Fatalf("mutual credentials, portal without discovery CHAP: %v\n%s%s", err, out, errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"--mode", "account", "--op", "new", "--user", "disc", "--password", "discsecret123"},
		{"--mode", "account", "--op", "bind", "--user", "disc"}, // no --tid: discovery
	} {
		if _, err := srv.Tgtadm(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	if out, errs, err := discover(creds...); err != nil || !strings.Contains(out, "iqn.2026-11.test:disc") {
		t.Fatalf("credentials, portal with discovery CHAP: %v\n%s%s", err, out, errs)
	}
	_, errs, err = discover()
	if err == nil || !strings.Contains(errs, "authentication failed") || !strings.Contains(errs, "initiator name "+initiatorIQN) {
		t.Fatalf("no credentials, portal with discovery CHAP: %v\n%s", err, errs)
	}
}
