package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
	"github.com/iser-attach/iser-attach/volume"
)

// TestCLIVolumeCheckEveryError: volume check reports every problem of a
// file, one PATH:LINE: key: reason line each, with a suggestion for a misspelt
// key; with and without NAME.
func TestCLIVolumeCheckEveryError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "volumes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "db.conf")
	conf := "portl = 10.0.0.1\ntarget = iqn.2026-11.test:db\nlun = 99999\nfrontend = loop\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{volume.ConfigDirEnv + "=" + dir}
	want := []string{
		path + ":1: portl: unknown key (did you mean 'portal'?)",
		path + ":3: lun: \"99999\": want a LUN from 0 to 16383",
		path + ":4: frontend: \"loop\": want ublk, nbd",
		path + ":0: portal: no portal (portal = host[:port])",
	}
	for _, args := range [][]string{{"volume", "check", "db"}, {"volume", "check"}} {
		out, errs, err := run(t, env, args...)
		if err == nil {
			t.Fatalf("%v: exit 0\n%s", args, out)
		}
		if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%v printed:\n%s\nwant:\n%s\nstderr: %s", args, out, strings.Join(want, "\n"), errs)
		}
	}
}

// TestCLIAttachVolumePositional: `attach NAME` is `attach --volume NAME`,
// and a volume file without lun means the target's lowest-numbered disk,
// as --lun left out does; `volume add` without --lun writes no lun line.
func TestCLIAttachVolumePositional(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}, {Size: 16 << 20}}})
	dir := filepath.Join(t.TempDir(), "volumes")
	env := []string{volume.ConfigDirEnv + "=" + dir}
	add := func(name string, extra ...string) {
		t.Helper()
		args := append([]string{"volume", "add", name, "--portal", srv.Portal(), "--target", srv.IQN(),
			"--transport", "tcp", "--frontend", "nbd"}, extra...)
		if _, errs, err := run(t, env, args...); err != nil {
			t.Fatalf("volume add %s: %v\n%s", name, err, errs)
		}
	}
	add("lun0", "--lun", "0")
	add("first")
	data, err := os.ReadFile(filepath.Join(dir, "first.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "lun") {
			t.Fatalf("volume add without --lun wrote %q", line)
		}
	}

	// The positional NAME reads the file: LUN 0, tgt's controller, is
	// refused with the message --volume gives. On a host without the
	// volume's frontend (nbd) attach stops before the login, saying so:
	// that it names the file's frontend proves the file was read.
	refusal := "LUN 0 is a controller (type 0x0c), not a disk; disk LUNs: 1, 2"
	noDriver := frontendMissing("nbd")
	if noDriver {
		refusal = "--frontend nbd: "
	}
	for _, args := range [][]string{{"attach", "lun0"}, {"attach", "--volume", "lun0"}, {"attach", "--volume", "lun0", "lun0"}} {
		_, errs, err := run(t, env, args...)
		if err == nil || !strings.Contains(lastLine(errs), refusal) {
			t.Errorf("%v: %v, want %q:\n%s", args, err, refusal, errs)
		}
	}
	for args, want := range map[string]string{
		"attach lun0 first":          "attach: expected [NAME], got 2 arguments",
		"attach --volume first lun0": "expected one volume",
		"attach --transport tcp x":   "--transport is not allowed with --volume",
		"attach nosuch":              "no volume nosuch",
	} {
		_, errs, err := run(t, env, strings.Fields(args)...)
		if err == nil || !strings.Contains(lastLine(errs), want) {
			t.Errorf("%s: %v, want %q:\n%s", args, err, want, errs)
		}
	}

	// No lun in the file: attach picks LUN 1 (after the login, so only
	// where the frontend's driver exists). Stop at the choice.
	if noDriver {
		t.Log("no nbd driver on this host: the LUN choice of a file without lun is not tried")
		return
	}
	cmd := exec.Command(binary, "--initiator-name", initiatorIQN, "attach", "first")
	cmd.Env = append(os.Environ(), env...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	const chosen = "no LUN given: using LUN 1, the target's lowest-numbered disk"
	deadline := time.After(30 * time.Second)
	for !strings.Contains(logs.String(), chosen) {
		select {
		case <-exited:
			if strings.Contains(logs.String(), chosen) {
				return // chose LUN 1, then found no NBD driver on this host
			}
			t.Fatalf("attach first exited without choosing LUN 1:\n%s", logs.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("attach first did not choose a LUN:\n%s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("attach did not stop on SIGINT:\n%s", logs.String())
	}
}
