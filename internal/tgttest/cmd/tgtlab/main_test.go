package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTgtlab builds tgtlab, starts it, checks the target with tgtadm,
// stops it with SIGTERM and checks that nothing is left.
func TestTgtlab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("tgtlab needs root (tgtd creates /var/run/tgtd)")
	}
	tgtadm, err := exec.LookPath("tgtadm")
	if err != nil {
		tgtadm = "/usr/sbin/tgtadm"
	}
	bin := filepath.Join(t.TempDir(), "tgtlab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "-luns", "2", "-size", "16M", "-thin", "-dir", dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	vars := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		vars[k] = v
		if k == "READY" {
			break
		}
	}
	if vars["READY"] != "1" {
		t.Fatalf("no READY line; got %v (%v)", vars, sc.Err())
	}
	out, err := exec.Command(tgtadm, "-C", vars["CONTROL_PORT"], "--lld", "iscsi", "--mode", "target", "--op", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("tgtadm show: %v\n%s", err, out)
	}
	for _, want := range []string{"Target 1: " + vars["TARGET"], "Backing store path: " + vars["LUN2"], "Thin-provisioning: Yes"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("tgtadm show lacks %q:\n%s", want, out)
		}
	}
	if filepath.Dir(vars["LUN1"]) != dir {
		t.Errorf("LUN1=%s, want a file in %s", vars["LUN1"], dir)
	}
	c, err := net.DialTimeout("tcp", vars["PORTAL"], 5*time.Second)
	if err != nil {
		t.Fatalf("PORTAL=%s: %v", vars["PORTAL"], err)
	}
	c.Close()

	pid, _ := strconv.Atoi(vars["TGTD_PID"])
	cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("tgtlab after SIGTERM: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("tgtlab did not exit within 10 s of SIGTERM")
	}
	if pid == 0 {
		t.Fatalf("TGTD_PID=%q", vars["TGTD_PID"])
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("tgtd %d still exists (%v)", pid, err)
	}
	if _, err := os.Stat("/var/run/tgtd/socket." + vars["CONTROL_PORT"]); !os.IsNotExist(err) {
		t.Errorf("control socket left behind (%v)", err)
	}
	if _, err := os.Stat(vars["LUN1"]); err != nil {
		t.Errorf("-dir backing file removed: %v", err)
	}
}
