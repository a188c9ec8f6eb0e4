package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iser-attach/iser-attach/csi"
	"github.com/iser-attach/iser-attach/volume"
)

// TestCSINodeAttachArgs: the node's attach --daemon command line carries the
// pool file's keys and the volume ID's target and LUN, and attach accepts
// every flag of it (it gets as far as the frontend check, before a login).
func TestCSINodeAttachArgs(t *testing.T) {
	volumeEnv(t)
	portal, logins := countingPortal(t)
	dir := t.TempDir()
	for f, secret := range map[string]string{"chap.secret": "secret-of-12-chars", "mutual.secret": "another-secret-16"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := filepath.Join(dir, "pool.conf")
	text := "portal = " + portal + "\ntarget = iqn.2026-11.test:pool\ntransport = tcp\nlogin_timeout = 20\n" +
		"chap_user = u\nchap_secret_file = " + filepath.Join(dir, "chap.secret") + "\nmutual_user = m\n" +
		"mutual_secret_file = " + filepath.Join(dir, "mutual.secret") + "\npath_selector = queue-length\nno_path_timeout = 30\n"
	cfg, err := volume.ParseConfig("pool", pool, strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	a := &nodeAttacher{cfg: cfg, initiator: initiatorIQN}
	args := a.attachArgs("csi-0123456789abcdef", "test-missing", csi.VolumeID{Target: "iqn.2026-11.test:disk", LUN: 3, LUID: "naa.1"}, true)
	joined := " " + strings.Join(args, " ") + " "
	for _, want := range []string{" attach --daemon ", " --name csi-0123456789abcdef ", " --target iqn.2026-11.test:disk ",
		" --lun 3 ", " --portal " + portal + " ", " --transport tcp ", " --login-timeout 20s ", " --chap-user u ",
		" --mutual-user m ", " --chap-secret-file " + filepath.Join(dir, "chap.secret") + " ", " --path-selector queue-length ",
		" --no-path-timeout 30s ", " --read-only ", " --initiator-name " + initiatorIQN + " "} {
		if !strings.Contains(joined, want) {
			t.Errorf("attach args %q lack %q", args, want)
		}
	}
	if strings.Contains(joined, "--reservation-key") {
		t.Errorf("a read-only stage fences: %q", args)
	}
	// Read-write with fencing: this node's key, the same for the same node ID.
	a.key = nodeKey("node-a")
	if a.key == 0 || a.key != nodeKey("node-a") || a.key == nodeKey("node-b") {
		t.Fatalf("node keys: %#x, %#x", a.key, nodeKey("node-b"))
	}
	rw := " " + strings.Join(a.attachArgs("csi-1", "ublk", csi.VolumeID{Target: "iqn.2026-11.test:disk", LUN: 3}, false), " ") + " "
	if want := fmt.Sprintf(" --reservation-key %016x ", a.key); !strings.Contains(rw, want) || strings.Contains(rw, "--read-only") {
		t.Errorf("read-write stage args %q lack %q", rw, want)
	}
	a.key = 0
	// A volume of another target: refused before anything runs (a.exe is
	// empty: running it would fail otherwise).
	if _, err := a.Attach(context.Background(), "csi-x", csi.VolumeID{Target: "iqn.2026-11.test:other", LUN: 1, LUID: "naa.1"}, false); !errors.Is(err, csi.ErrNotInPool) {
		t.Fatalf("attach of another target's LUN: %v", err)
	}
	frontendChecks["test-missing"] = func(context.Context) error { return errors.New("driver not loaded") }
	frontends["test-missing"] = frontends["ublk"]
	defer delete(frontendChecks, "test-missing")
	defer delete(frontends, "test-missing")
	app := newApp()
	var sb strings.Builder
	app.Writer, app.ErrWriter = &sb, &sb
	inProcess := slices.DeleteFunc(slices.Clone(args), func(s string) bool { return s == "--daemon" })
	err = app.Run(append([]string{"iser-attach"}, inProcess...))
	if err == nil || err.Error() != "--frontend test-missing: driver not loaded" {
		t.Fatalf("attach %q: %v\n%s", inProcess, err, sb.String())
	}
	if n := logins.Load(); n != 0 {
		t.Fatalf("logged in %d times", n)
	}
}

// TestCSINodeFrontend: ublk where its check passes, else nbd, else an
// error naming both.
func TestCSINodeFrontend(t *testing.T) {
	oldU, oldN := frontendChecks["ublk"], frontendChecks["nbd"]
	defer func() { frontendChecks["ublk"], frontendChecks["nbd"] = oldU, oldN }()
	ok := func(context.Context) error { return nil }
	no := func(what string) func(context.Context) error {
		return func(context.Context) error { return errors.New(what + " missing") }
	}
	a := &nodeAttacher{}
	for _, tc := range []struct {
		u, n      func(context.Context) error
		want, err string
	}{
		{ok, ok, "ublk", ""},
		{no("ublk_drv"), ok, "nbd", ""},
		{no("ublk_drv"), no("nbd"), "", "no frontend: --frontend ublk: ublk_drv missing; --frontend nbd: nbd missing"},
	} {
		frontendChecks["ublk"], frontendChecks["nbd"] = tc.u, tc.n
		got, err := a.pickFrontend(context.Background())
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("pickFrontend = %q, %v; want %q, %q", got, err, tc.want, tc.err)
		}
	}
}
