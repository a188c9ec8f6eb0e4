package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

type lunRow struct {
	Initiator string `json:"initiator"`
	Target    string `json:"target"`
	LUN       int    `json:"lun"`
	Type      string `json:"type"`
	Size      int64  `json:"size"`
	BlockSize int    `json:"block_size"`
	Vendor    string `json:"vendor"`
	Product   string `json:"product"`
	WWN       string `json:"wwn"`
	Error     string `json:"error"`
}

// TestCLIInfoListsLUNs: info without --lun lists tgt's controller (LUN 0)
// and both backing stores, in a table and as a JSON array; every form
// shows the initiator name in use.
func TestCLIInfoListsLUNs(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 64 << 20}, {Size: 32 << 20, BlockSize: 4096}}})
	base := []string{"info", "--portal", srv.Portal(), "--target", srv.IQN(), "--transport", "tcp"}
	out, errs, err := run(t, nil, append(base, "--json")...)
	if err != nil {
		t.Fatalf("info --json: %v\n%s", err, errs)
	}
	var rows []lunRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	want := []lunRow{
		{LUN: 0, Type: "controller", Vendor: "IET", Product: "Controller"},
		{LUN: 1, Type: "disk", Size: 64 << 20, BlockSize: 512, Vendor: "IET", Product: "VIRTUAL-DISK"},
		{LUN: 2, Type: "disk", Size: 32 << 20, BlockSize: 4096, Vendor: "IET", Product: "VIRTUAL-DISK"},
	}
	if len(rows) != len(want) {
		t.Fatalf("info --json listed %d LUNs, want %d:\n%s", len(rows), len(want), out)
	}
	for i, w := range want {
		r := rows[i]
		w.Initiator, w.Target, w.WWN, w.Error = initiatorIQN, srv.IQN(), r.WWN, ""
		if r != w || !strings.HasPrefix(r.WWN, "naa.") { // tgt gives its controller a WWN too
			t.Fatalf("LUN %d: %+v, want %+v", i, r, w)
		}
	}

	out, errs, err = run(t, nil, base...)
	if err != nil {
		t.Fatalf("info: %v\n%s", err, errs)
	}
	for _, re := range []string{`(?m)^initiator\s+` + regexp.QuoteMeta(initiatorIQN) + `$`,
		`(?m)^LUN\s+TYPE\s+SIZE\s+BLOCK\s+VENDOR\s+PRODUCT\s+WWN$`,
		`(?m)^0\s+controller\s+-\s+-\s+IET\s+Controller\s+` + regexp.QuoteMeta(rows[0].WWN) + `$`,
		`(?m)^1\s+disk\s+64\.0 MiB\s+512\s+IET\s+VIRTUAL-DISK\s+` + regexp.QuoteMeta(rows[1].WWN) + `$`,
		`(?m)^2\s+disk\s+32\.0 MiB\s+4096\s+IET\s+VIRTUAL-DISK\s+` + regexp.QuoteMeta(rows[2].WWN) + `$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("table does not match %s:\n%s", re, out)
		}
	}

	// --lun N keeps the one-LUN description, with the initiator name.
	out, errs, err = run(t, nil, append(base, "--lun", "2", "--json")...)
	var one lunRow
	if err != nil || json.Unmarshal([]byte(out), &one) != nil || one.LUN != 2 || one.Size != 32<<20 ||
		one.Initiator != initiatorIQN || one.Type != "disk" {
		t.Fatalf("info --lun 2 --json: %v %+v\n%s%s", err, one, out, errs)
	}
	out, _, err = run(t, nil, append(base, "--lun", "1")...)
	if err != nil || !regexp.MustCompile(`(?m)^initiator\s+`+regexp.QuoteMeta(initiatorIQN)+`$`).MatchString(out) ||
		!strings.Contains(out, "write cache") {
		t.Fatalf("info --lun 1: %v\n%s", err, out)
	}
}

// TestCLIDefaultLUN: serve without --lun exports tgt's LUN 1 (its first
// backing store; LUN 0 is the controller) and says so; an explicit LUN 0
// fails up front, for serve and attach, naming the disk LUNs.
func TestCLIDefaultLUN(t *testing.T) {
	need(t, "nbdinfo")
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 48 << 20}, {Size: 32 << 20}}})
	uri, logs := startServe(t, srv, nil, "")
	var info struct {
		Exports []struct {
			Size        int64  `json:"export-size"`
			Description string `json:"description"`
		} `json:"exports"`
	}
	if err := json.Unmarshal([]byte(sh(t, "nbdinfo", "--json", uri)), &info); err != nil || len(info.Exports) != 1 {
		t.Fatalf("nbdinfo: %v %+v", err, info)
	}
	if e := info.Exports[0]; e.Size != 48<<20 || !strings.Contains(e.Description, "lun 1 ") {
		t.Fatalf("served %+v, want LUN 1 (48 MiB)", e)
	}
	if n := strings.Count(logs.String(), "no LUN given: using LUN 1, the target's lowest-numbered disk"); n != 1 {
		t.Fatalf("%d log lines say which LUN was chosen, want 1:\n%s", n, logs.String())
	}

	const refusal = "LUN 0 is a controller (type 0x0c), not a disk; disk LUNs: 1, 2"
	for _, args := range [][]string{
		{"serve", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "0", "--transport", "tcp", "--listen", "unix:" + filepath.Join(t.TempDir(), "nbd2.sock")},
		{"attach", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "0", "--transport", "tcp", "--frontend", "nbd", "--name", "lun0-refused"},
	} {
		_, errs, err := run(t, nil, args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		last := lines[len(lines)-1]
		if args[0] == "attach" && frontendMissing("nbd") {
			// attach checks the driver before it logs in: on a host
			// without nbd it stops there, and the LUN is never asked.
			if err == nil || !strings.HasPrefix(last, "iser-attach: --frontend nbd: ") {
				t.Fatalf("attach without the nbd driver: %v, want the frontend's error:\n%s", err, errs)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(last, "iser-attach: ") || !strings.HasSuffix(last, refusal) {
			t.Fatalf("%s --lun 0: %v, want the last line to end with %q:\n%s", args[0], err, refusal, errs)
		}
	}
}

// TestCLIValidatesNames: a target or initiator name that is not an iqn.,
// eui. or naa. name is refused before any connection (the portal is
// closed: had it been tried, the error would say so), in one line, as a
// usage mistake (exit status 2).
func TestCLIValidatesNames(t *testing.T) {
	const closed = "127.0.0.1:1"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"info target", []string{"--initiator-name", initiatorIQN, "info", "--portal", closed, "--target", "disk1"}, `--target: "disk1" is not an iSCSI name`},
		{"serve target", []string{"--initiator-name", initiatorIQN, "serve", "--portal", closed, "--target", "iqn.", "--listen", "unix:/nonexistent/x"}, `--target: "iqn." is not an iSCSI name`},
		{"attach target", []string{"--initiator-name", initiatorIQN, "attach", "--portal", closed, "--target", "iqn.x y", "--frontend", "nbd"}, "--target: \"iqn.x y\": spaces"},
		{"info initiator", []string{"--initiator-name", "host1", "info", "--portal", closed, "--target", "iqn.2026-11.test:t"}, `--initiator-name: "host1" is not an iSCSI name`},
		{"discover initiator", []string{"--initiator-name", "host1", "discover", closed}, `--initiator-name: "host1" is not an iSCSI name`},
		{"serve initiator", []string{"--initiator-name", "nqn.2014-08.org.example:x", "serve", "--portal", closed, "--target", "iqn.2026-11.test:t", "--listen", "unix:/nonexistent/x"}, "--initiator-name: \"nqn.2014-08.org.example:x\" is not an iSCSI name"},
		{"volume add initiator", []string{"volume", "add", "v1", "--portal", closed, "--target", "iqn.2026-11.test:t", "--initiator-name", "host1"}, `--initiator-name: "host1" is not an iSCSI name`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, c.args...)
			cmd.Env = append(os.Environ(), "ISER_ATTACH_CONFIG_DIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != "iser-attach: "+strings.TrimPrefix(got, "iser-attach: ") ||
				strings.Contains(got, "\n") || !strings.Contains(got, c.want) {
				t.Fatalf("output %q, want one line with %q", got, c.want)
			}
		})
	}
}

// frontendMissing reports whether attach's frontend check fails on this
// host (no ublk_drv or nbd driver): attach then stops before its login.
func frontendMissing(name string) bool {
	return checkFrontend(context.Background(), name) != nil
}
