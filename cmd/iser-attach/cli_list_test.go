package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
	"github.com/iser-attach/iser-attach/volume"
)

// listed is one entry of `list --json`.
type listed struct {
	Kind      string   `json:"kind"`
	Initiator string   `json:"initiator"`
	Name      string   `json:"name"`
	Listen    []string `json:"listen"`
	Portal    string   `json:"portal"`
	Target    string   `json:"target"`
	LUN       uint16   `json:"lun"`
	Transport string   `json:"transport"`
	State     string   `json:"state"`
	PID       int      `json:"pid"`
	Counters  struct {
		Reads     uint64 `json:"reads"`
		ReadBytes uint64 `json:"read_bytes"`
	} `json:"counters"`
}

// listPID returns list --json's entry for process pid, if any.
func listPID(t *testing.T, pid int) (listed, bool) {
	t.Helper()
	out, errs, err := run(t, nil, "list", "--json")
	if err != nil {
		t.Fatalf("list --json: %v\n%s", err, errs)
	}
	var all []listed
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	for _, e := range all {
		if e.PID == pid {
			return e, true
		}
	}
	return listed{}, false
}

// TestCLIListShowsServe: a running serve process answers on a control
// socket of its own, so list (and list --json) shows it with its export,
// listeners, session and counters; once it stops it is gone and so is its
// socket.
func TestCLIListShowsServe(t *testing.T) {
	need(t, "qemu-io")
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	cmd, logs, exited := startBinary(t, "--initiator-name", initiatorIQN, "serve", "--portal", srv.Portal(), "--target", srv.IQN(),
		"--transport", "tcp", "--listen", "unix:"+sock, "--export-name", "exp1")
	defer func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	}()
	pid := cmd.Process.Pid
	ctl := volume.ServeSocketPath(pid)
	var e listed
	for i := 0; ; i++ {
		var ok bool
		if e, ok = listPID(t, pid); ok {
			break
		}
		if i == 100 {
			t.Fatalf("list does not show serve (pid %d) after 10 s", pid)
		}
		select {
		case err := <-exited:
			t.Fatalf("serve exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if e.Kind != "serve" || e.Name != "exp1" || len(e.Listen) != 1 || e.Listen[0] != "unix:"+sock ||
		e.Portal != srv.Portal() || e.Target != srv.IQN() || e.LUN != 1 || e.Transport != "tcp" || e.State != "serving" ||
		e.Initiator != initiatorIQN {
		t.Fatalf("list --json entry %+v", e)
	}
	sh(t, "qemu-io", "-f", "raw", "-r", "-c", "read 0 64k", "nbd+unix:///exp1?socket="+sock)
	if e, _ = listPID(t, pid); e.Counters.Reads == 0 || e.Counters.ReadBytes < 64<<10 {
		t.Errorf("counters after a 64 KiB read: %+v", e.Counters)
	}
	// The socket answers stats requests as a volume's does.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	st, err := volume.QueryStats(ctx, ctl)
	cancel()
	if err != nil || st.Name != "exp1" || st.TimeNanos == 0 {
		t.Errorf("stats from serve's socket: %v %+v", err, st)
	}
	out, _, err := run(t, nil, "list")
	if err != nil {
		t.Fatal(err)
	}
	row := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "exp1 ") && strings.Contains(line, "unix:"+sock) {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 9 || f[1] != "serve" || f[3] != srv.Portal() || f[5] != "1" || f[8] != "serving" {
		t.Errorf("list table has no row for serve:\n%s", out)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on SIGINT")
	}
	if _, ok := listPID(t, pid); ok {
		t.Errorf("list shows serve (pid %d) after it stopped", pid)
	}
	if _, err := os.Stat(ctl); !os.IsNotExist(err) {
		t.Errorf("control socket %s left behind: %v", ctl, err)
	}
}
