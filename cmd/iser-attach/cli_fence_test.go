package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/scsi"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestServeFence: serve --reservation-key on tgtd, as two nodes would.
// Node A fences the LUN; node B's serve is refused with exit status 4,
// naming A's key and --preempt; B with --preempt takes the LUN and A's
// writes fail (qemu-io sees the I/O error); B's clean stop releases the
// reservation and leaves no key registered.
func TestServeFence(t *testing.T) {
	need(t, "qemu-io")
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	nodeA := []string{"--initiator-name", "iqn.2026-11.io.iser-attach:node-a"}
	nodeB := []string{"--initiator-name", "iqn.2026-11.io.iser-attach:node-b"}
	write := func(uri string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 64k", "-c", "flush", uri).CombinedOutput()
		if err == nil && strings.Contains(string(out), "error") {
			err = errors.New(strings.TrimSpace(string(out)))
		}
		return err
	}
	// A runs outside startServe: fenced out, its final flush fails, and so
	// does its exit.
	sockA := t.TempDir() + "/a.sock"
	cmdA, logsA, exitedA := startBinary(t, append(append([]string{}, nodeA...), "serve", "--portal", srv.Portal(),
		"--target", srv.IQN(), "--lun", "1", "--transport", "tcp", "--listen", "unix:"+sockA, "--reservation-key", "0xa1")...)
	defer cmdA.Process.Kill()
	for i := 0; ; i++ {
		if _, err := os.Stat(sockA); err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("A serves no socket:\n%s", logsA.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	uriA := "nbd+unix:///?socket=" + sockA
	if err := write(uriA); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	if !strings.Contains(logsA.String(), "reservation held") {
		t.Fatalf("A's log says nothing of the reservation:\n%s", logsA.String())
	}

	// B without --preempt: refused, exit 4, one line naming the holder's key.
	args := append(append([]string{}, nodeB...), "serve", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1",
		"--transport", "tcp", "--listen", "unix:"+t.TempDir()+"/b.sock", "--reservation-key", "b2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitReserved {
		t.Fatalf("B's serve: %v, want exit status %d\n%s", err, exitReserved, out)
	}
	if !strings.Contains(string(out), "reserved by key 0x00000000000000a1 (Write Exclusive, Registrants Only)") ||
		!strings.Contains(string(out), "--preempt") {
		t.Fatalf("B's error does not name the holder and --preempt:\n%s", out)
	}

	// B with --preempt takes it; A's writes fail from then on. (Registered
	// first, the key check runs after B's serve has stopped.)
	t.Cleanup(func() { noKeysLeft(t, srv) })
	_, logsB := startServe(t, srv, nodeB, "1", "--reservation-key", "b2", "--preempt")
	if !strings.Contains(logsB.String(), "preempted_key=0x00000000000000a1") {
		t.Errorf("B's log does not say whom it preempted:\n%s", logsB.String())
	}
	if err := write(uriA); err == nil {
		t.Fatal("A's write succeeded after B preempted it")
	}

	// A, fenced out, ends with an error: its final SYNCHRONIZE CACHE
	// conflicts (what it acknowledged after the preempt may be lost).
	cmdA.Process.Signal(os.Interrupt)
	select {
	case err := <-exitedA:
		if err == nil || !strings.Contains(logsA.String(), "RESERVATION CONFLICT") {
			t.Errorf("fenced-out A exited with %v:\n%s", err, logsA.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("A did not exit on SIGINT")
	}
}

// noKeysLeft checks that the LUN has no registered key.
func noKeysLeft(t *testing.T, srv *tgttest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := initiator.Connect(ctx, initiator.DialConfig{Transport: "tcp", Addr: srv.Portal()},
		initiator.SessionConfig{LoginConfig: initiator.LoginConfig{InitiatorName: "iqn.2026-11.io.iser-attach:check",
			TargetName: srv.IQN(), ISID: initiator.NewISID()}})
	if err != nil {
		t.Error(err)
		return
	}
	defer s.Close()
	l, err := initiator.OpenLUN(ctx, s, 1)
	if err != nil {
		t.Error(err)
		return
	}
	if k, err := l.ReadKeys(ctx); err != nil || len(k.Keys) != 0 {
		t.Errorf("keys left after the serves stopped: %+v, %v", k, err)
	}
}

// TestServeRefenceAfterTargetRestart: tgtd keeps no reservation across its
// restart (no APTPL). Once serve's session is reinstated it reserves the
// LUN again with its key; without that the LUN would be left unfenced.
func TestServeRefenceAfterTargetRestart(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	_, logs := startServe(t, srv, nil, "1", "--reservation-key", "c3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := reservation(t, srv); !r.Reserved || r.Key != 0xc3 {
		t.Fatalf("before the restart: %+v", r)
	}
	if err := srv.Restart(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	for {
		if r := reservation(t, srv); r.Reserved && r.Key == 0xc3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not reserved again after tgtd's restart:\n%s", logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// reservation reads the LUN's reservation through a session of its own.
func reservation(t *testing.T, srv *tgttest.Server) scsi.PRReservation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := initiator.Connect(ctx, initiator.DialConfig{Transport: "tcp", Addr: srv.Portal()},
		initiator.SessionConfig{LoginConfig: initiator.LoginConfig{InitiatorName: "iqn.2026-11.io.iser-attach:check",
			TargetName: srv.IQN(), ISID: initiator.NewISID()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := initiator.OpenLUN(ctx, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.ReadReservation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
