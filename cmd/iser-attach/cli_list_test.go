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
	Export    *string  `json:"export"`
	Device    string   `json:"device"`
	Frontend  string   `json:"frontend"`
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
		e.Initiator != initiatorIQN || e.Export == nil || *e.Export != "exp1" || e.Frontend != "nbd-server" || e.Device != "unix:"+sock {
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
	out, _, err := run(t, nil, "list", "--wide")
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

// TestCLIServeDefaultExportOneName: serve's default export (NBD name "")
// has one name, TARGET-lunN as attach would call the LUN, in list, list
// --json and stats (which reports serve processes too); its metrics label
// comes from the same exportMetricsName.
func TestCLIServeDefaultExportOneName(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	cmd, logs, exited := startBinary(t, "--initiator-name", initiatorIQN, "serve", "--portal", srv.Portal(), "--target", srv.IQN(),
		"--transport", "tcp", "--listen", "unix:"+sock)
	defer func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	}()
	pid := cmd.Process.Pid
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
	name := defaultVolumeName(srv.IQN(), 1)
	if e.Name != name || e.Export == nil || *e.Export != "" || e.Frontend != "nbd-server" {
		t.Fatalf("list --json: name %q export %v frontend %q; want %q, \"\" and nbd-server", e.Name, e.Export, e.Frontend, name)
	}
	out, _, err := run(t, nil, "list")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name && strings.Contains(line, "nbd-server") {
			found = true
		}
	}
	if !found {
		t.Errorf("list table has no row named %s:\n%s", name, out)
	}
	for _, args := range [][]string{{"stats", "--count", "1", "--interval", "0.2"}, {"stats", name, "--count", "1", "--interval", "0.2"}} {
		out, errs, err := run(t, nil, args...)
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, errs)
		}
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				found = true
			}
		}
		if !found {
			t.Errorf("%q has no row named %s:\n%s", args, name, out)
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on SIGINT")
	}
}

// TestListTable: list's default table fits 100 columns whatever the names
// (long ones are clipped at the front), --wide has every column, and the
// cells are list --json's fields (frontend in both).
func TestListTable(t *testing.T) {
	all := []volume.Status{
		{Name: "a-rather-long-volume-name-from-a-long-iqn-lun16383", Kind: "attach", Device: "/dev/ublkb12",
			Portal: "[fd00:1234:5678:9abc::10]:3260", Target: "iqn.2026-11.com.example.storage:a-very-long-target-name",
			LUN: 16383, Transport: "iser", Frontend: "ublk", State: "recovering", Recoveries: 12345,
			Initiator: "iqn.2026-11.io.iser-attach:host-0123456789ab", Counters: volume.Counters{Reads: 1 << 40, Errors: 123456}},
		{Name: "disk1-lun1", Kind: "serve", Device: "unix:/run/some/long/directory/for/the/nbd/export.sock,tcp:127.0.0.1:10809",
			Portal: "10.0.0.1:3260", Target: "iqn.2026-11.test:disk1", LUN: 1, Transport: "tcp", Frontend: "nbd-server", State: "serving"},
	}
	var narrow, wide strings.Builder
	if err := writeListTable(&narrow, all, false); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(narrow.String(), "\n"), "\n") {
		if len(line) > 100 {
			t.Errorf("line of %d columns:\n%s", len(line), line)
		}
	}
	head := strings.Fields(strings.SplitN(narrow.String(), "\n", 2)[0])
	if strings.Join(head, " ") != "NAME DEVICE LUN TRANSPORT FRONTEND STATE ERRORS" {
		t.Errorf("narrow header %q", head)
	}
	if !strings.Contains(narrow.String(), "...a-long-iqn-lun16383 ") || !strings.Contains(narrow.String(), "nbd-server") {
		t.Errorf("narrow table:\n%s", narrow.String())
	}
	if err := writeListTable(&wide, all, true); err != nil {
		t.Fatal(err)
	}
	head = strings.Fields(strings.SplitN(wide.String(), "\n", 2)[0])
	if len(head) != len(listColumns) {
		t.Errorf("wide header %q", head)
	}
	for _, s := range all {
		if !strings.Contains(wide.String(), s.Name+" ") || !strings.Contains(wide.String(), s.Device) || !strings.Contains(wide.String(), s.Target) {
			t.Errorf("wide table lacks %s's cells:\n%s", s.Name, wide.String())
		}
	}
	// Every column is a field of list --json.
	b, _ := json.Marshal(all[0])
	var fields map[string]any
	_ = json.Unmarshal(b, &fields)
	for _, h := range head {
		key := map[string]string{"READS": "counters", "WRITES": "counters", "BYTES": "counters", "ERRORS": "counters", "IOPS": "counters"}[h]
		if key == "" {
			key = strings.ToLower(h)
		}
		if _, ok := fields[key]; !ok {
			t.Errorf("column %s is not in list --json (%s)", h, b)
		}
	}
}

// TestListTablePaths: after the volumes, list shows each multipath
// volume's paths (portal, state, ALUA, I/Os, in flight, last error;
// --wide adds failovers), within 100 columns by default with the last
// error's end kept, and every column is a field of list --json's paths.
func TestListTablePaths(t *testing.T) {
	all := []volume.Status{
		{Name: "single", Kind: "attach", Device: "/dev/ublkb0", Portal: "10.0.0.1:3260", State: "attached"},
		{Name: "a-rather-long-volume-name-from-a-long-iqn-lun16383", Kind: "attach", Device: "/dev/ublkb1",
			Portal: "192.168.100.200:3260", State: "attached", Paths: []volume.PathStatus{
				{Portal: "192.168.100.200:3260", State: "up", ALUA: "active/non-optimized", IOs: 12345678, InFlight: 128},
				{Portal: "[fd00:1234:5678:9abc::11]:3260", State: "transitioning", ALUA: "transitioning", IOs: 17, Failovers: 3,
					LastError: "session lost: read tcp 192.168.100.1:51234->192.168.100.201:3260: read: connection reset by peer"},
			}},
	}
	var narrow, wide strings.Builder
	if err := writeListTable(&narrow, all, false); err != nil {
		t.Fatal(err)
	}
	out := narrow.String()
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if len(line) > 100 {
			t.Errorf("line of %d columns:\n%s", len(line), line)
		}
	}
	if strings.Contains(out, "single: ") {
		t.Errorf("a single-path volume has a path table:\n%s", out)
	}
	_, paths, ok := strings.Cut(out, "\n...a-long-iqn-lun16383: 2 paths\n")
	if !ok {
		t.Fatalf("no path table for the multipath volume:\n%s", out)
	}
	lines := strings.Split(strings.TrimSuffix(paths, "\n"), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "PORTAL STATE ALUA IOS IN_FLIGHT LAST_ERROR" {
		t.Fatalf("path table:\n%s", paths)
	}
	if f := strings.Fields(lines[1]); len(f) != 6 || f[0] != "192.168.100.200:3260" || f[1] != "up" || f[2] != "active/non-optimized" ||
		f[3] != "12345678" || f[4] != "128" || f[5] != "-" {
		t.Errorf("first path's line %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 6 || f[0] != "...5678:9abc::11]:3260" || f[1] != "transitioning" ||
		!strings.HasPrefix(f[5], "...") || !strings.HasSuffix(lines[2], "reset by peer") {
		t.Errorf("second path's line %q: want the portal's and the error's ends (%q)", lines[2], strings.Fields(lines[2]))
	}
	if err := writeListTable(&wide, all, true); err != nil {
		t.Fatal(err)
	}
	_, paths, _ = strings.Cut(wide.String(), "\na-rather-long-volume-name-from-a-long-iqn-lun16383: 2 paths\n")
	lines = strings.Split(strings.TrimSuffix(paths, "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], all[1].Paths[1].LastError) || !strings.Contains(lines[2], all[1].Paths[1].Portal) {
		t.Fatalf("wide path table:\n%s", wide.String())
	}
	head := strings.Fields(lines[0])
	if len(head) != len(pathColumns) {
		t.Errorf("wide path header %q", head)
	}
	b, _ := json.Marshal(all[1].Paths[1])
	var fields map[string]any
	_ = json.Unmarshal(b, &fields)
	for _, h := range head {
		if _, ok := fields[strings.ToLower(h)]; !ok {
			t.Errorf("path column %s is not in list --json's paths (%s)", h, b)
		}
	}
}
