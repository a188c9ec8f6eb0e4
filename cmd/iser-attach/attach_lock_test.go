package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/volume"
)

// countingPortal is a portal that counts connections (every login starts
// with one) and closes them.
func countingPortal(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), &n
}

// holdLock stands in for a first attach of volume name that serves
// device: another process (flock(1)) holds the attach lock.
func holdLock(t *testing.T, name, device string) int {
	t.Helper()
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Fatal("flock(1) is missing: apt-get install util-linux")
	}
	path := filepath.Join(volume.RunDir, name+".lock")
	cmd := exec.Command(flock, "--exclusive", "--nonblock", path, "sh", "-c", "echo locked; exec sleep 120")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("flock(1): %q %v", line, err)
	}
	// What a first attach writes once its device is ready.
	if err := os.WriteFile(path, []byte(strconv.Itoa(cmd.Process.Pid)+" "+device+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// runInProcess runs the CLI in this process (volume.RunDir is the test's).
func runInProcess(args ...string) (string, error) {
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{"iser-attach", "--initiator-name", initiatorIQN}, args...))
	return out.String(), err
}

// A second attach of a live volume must fail at once, before it logs in:
// a login with the volume's ISID would reinstate the first one's session,
// and its device recovery would then stop the first one's device.
func TestAttachRefusesLiveVolumeBeforeLogin(t *testing.T) {
	volumeEnv(t)
	portal, logins := countingPortal(t)
	attach := []string{"attach", "--portal", portal, "--target", "iqn.2026-11.test:disk", "--lun", "1",
		"--transport", "tcp", "--name", "db"}

	pid := holdLock(t, "db", "/dev/ublkb0")
	want := "volume db is already attached by pid " + strconv.Itoa(pid) + " (/dev/ublkb0)"
	for _, args := range [][]string{attach, append(attach, "--daemon")} {
		start := time.Now()
		_, err := runInProcess(args...)
		if err == nil || err.Error() != want {
			t.Fatalf("%s: %v, want %q", strings.Join(args, " "), err, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %v to refuse", strings.Join(args, " "), d)
		}
		if n := logins.Load(); n != 0 {
			t.Fatalf("%s connected to the portal %d times before refusing", strings.Join(args, " "), n)
		}
	}
}

// A server that predates the lock answers on its control socket: that
// stops a second attach before it logs in, too.
func TestAttachRefusesVolumeServedWithoutLock(t *testing.T) {
	volumeEnv(t)
	portal, logins := countingPortal(t)
	srv, err := volume.ListenControl("db", &fakeAttached{volume.Status{Name: "db", Device: "/dev/ublkb4", PID: 4242}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, err = runInProcess("attach", "--portal", portal, "--target", "iqn.2026-11.test:disk", "--lun", "1",
		"--transport", "tcp", "--name", "db")
	if err == nil || err.Error() != "volume db is already attached by pid 4242 (/dev/ublkb4)" {
		t.Fatalf("attach: %v", err)
	}
	if n := logins.Load(); n != 0 {
		t.Fatalf("connected to the portal %d times before refusing", n)
	}
}

// A host without the frontend's kernel driver fails attach before any
// login: nothing is logged in for a device that cannot be made.
func TestAttachChecksFrontendBeforeLogin(t *testing.T) {
	volumeEnv(t)
	portal, logins := countingPortal(t)
	frontendChecks["test-missing"] = func(context.Context) error { return errors.New("driver not loaded") }
	frontends["test-missing"] = func(context.Context, *attachSpec, *counting.Backend, *lunConn) (blockDevice, error) {
		t.Error("the frontend was asked for a device")
		return nil, errors.New("unreachable")
	}
	defer delete(frontendChecks, "test-missing")
	defer delete(frontends, "test-missing")
	_, err := runInProcess("attach", "--portal", portal, "--target", "iqn.2026-11.test:disk", "--lun", "1",
		"--transport", "tcp", "--name", "db", "--frontend", "test-missing")
	if err == nil || err.Error() != "--frontend test-missing: driver not loaded" {
		t.Fatalf("attach: %v", err)
	}
	if n := logins.Load(); n != 0 {
		t.Fatalf("connected to the portal %d times before refusing", n)
	}
}
