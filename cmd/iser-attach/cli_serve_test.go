package main

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// freeTCPPort returns a loopback port nobody listens on right now.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestServeAllowRemote: NBD has no authentication, so serve refuses a TCP
// listener other hosts can reach unless --allow-remote is given, with one
// line naming the flag and before it logs in; loopback TCP and unix: need
// no flag.
func TestServeAllowRemote(t *testing.T) {
	need(t, "nbdinfo")
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	target := []string{"serve", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1", "--transport", "tcp"}

	for _, spec := range []string{"tcp:0.0.0.0:" + freeTCPPort(t), "tcp::" + freeTCPPort(t), "tcp:[::]:" + freeTCPPort(t)} {
		_, errs, err := run(t, nil, append(target, "--listen", spec)...)
		if err == nil {
			t.Fatalf("serve --listen %s without --allow-remote exited 0", spec)
		}
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, "iser-attach: ") || !strings.Contains(last, "--allow-remote") ||
			!strings.Contains(last, spec) {
			t.Fatalf("last line %q, want it to name %s and --allow-remote; stderr:\n%s", last, spec, errs)
		}
		if strings.Contains(errs, "logged in") {
			t.Fatalf("serve logged in before refusing the listener:\n%s", errs)
		}
	}

	// With --allow-remote the wildcard listener serves; a loopback TCP
	// listener needs no flag.
	for _, c := range []struct {
		host  string
		extra []string
	}{{"0.0.0.0", []string{"--allow-remote"}}, {"127.0.0.1", nil}} {
		port := freeTCPPort(t)
		_, logs := startServe(t, srv, nil, "1", append(c.extra, "--listen", "tcp:"+c.host+":"+port)...)
		out, err := exec.Command("nbdinfo", "--json", "nbd://127.0.0.1:"+port).CombinedOutput()
		if err != nil {
			t.Fatalf("nbdinfo over tcp:%s:%s: %v\n%s\nserve log:\n%s", c.host, port, err, out, logs.String())
		}
		var info struct {
			Exports []map[string]any `json:"exports"`
		}
		if err := json.Unmarshal(out, &info); err != nil || len(info.Exports) != 1 || info.Exports[0]["export-size"] != float64(16<<20) {
			t.Fatalf("nbdinfo over tcp:%s: %v %s", c.host, err, out)
		}
	}
}

// TestServeFlushesOnError: serve that fails after logging in (here its
// second listener cannot be opened) still sends SYNCHRONIZE CACHE before it
// logs out, as it does after a signal.
func TestServeFlushesOnError(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	flushes := func() int {
		t.Helper()
		if err := srv.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		return srv.Commands(1, tgttest.OpSynchronizeCache10).Done
	}
	// After SIGINT (startServe's cleanup sends it and waits for exit 0).
	t.Run("signal", func(t *testing.T) { startServe(t, srv, nil, "1") })
	if n := flushes(); n != 1 {
		t.Fatalf("%d SYNCHRONIZE CACHE after serve ended on a signal, want 1", n)
	}

	dir := t.TempDir()
	_, errs, err := run(t, nil, "serve", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1", "--transport", "tcp",
		"--listen", "unix:"+filepath.Join(dir, "ok.sock"), "--listen", "unix:"+filepath.Join(dir, "missing", "nbd.sock"))
	if err == nil {
		t.Fatalf("serve with an unusable listener exited 0:\n%s", errs)
	}
	if !strings.Contains(errs, "logged in") || !strings.Contains(errs, "missing") {
		t.Fatalf("serve did not fail where expected (after login, on the second listener):\n%s", errs)
	}
	if n := flushes(); n != 2 {
		t.Fatalf("%d SYNCHRONIZE CACHE in all, want 2: serve logged out without flushing after an error; serve log:\n%s", n, errs)
	}
}
