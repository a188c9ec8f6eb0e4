package tgttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRestartKeepsDataAndConfiguration crashes tgtd between two qemu-io
// runs: the portal refuses connections while it is down, then the same
// portal and control port serve the same targets, LUNs and CHAP account,
// and the data written before the crash is still there, in the backing
// files and through a new login.
func TestRestartKeepsDataAndConfiguration(t *testing.T) {
	const iqn = "iqn.2024-01.io.iser-attach.test:restart"
	const chapIQN = "iqn.2024-01.io.iser-attach.test:restart-chap"
	s := Start(t, Target{IQN: iqn, LUNs: []LUN{{Size: 8 << 20}, {Size: 4 << 20, BlockSize: 4096}}},
		Target{IQN: chapIQN, CHAP: &CHAP{"carol", "carolsecret12"}})
	mustQemuIO(t, iscsiURL(s, iqn, 1), "write -P 0x5c 0 1M", "write -P 0xc5 7M 1M")
	mustQemuIO(t, iscsiURL(s, iqn, 2), "write -P 0x3d 8k 64k")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, err := s.Show(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid, portal, ctl, oldDone := s.PID(), s.Portal(), s.ControlPort(), s.Done()

	const down = time.Second
	start := time.Now()
	restarted := make(chan error, 1)
	go func() { restarted <- s.Restart(ctx, down) }()
	select {
	case <-oldDone:
	case <-time.After(5 * time.Second):
		t.Fatal("tgtd not killed")
	}
	if c, err := net.DialTimeout("tcp", portal, time.Second); err == nil {
		c.Close()
		t.Error("the portal accepts connections while tgtd is down")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial while down: %v, want connection refused", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < down {
		t.Errorf("Restart took %v, less than the %v down time", d, down)
	}
	t.Logf("restart with %v down took %v", down, time.Since(start))
	if s.PID() == pid || s.Portal() != portal || s.ControlPort() != ctl {
		t.Fatalf("after Restart: pid %d (was %d), portal %s (was %s), control port %d (was %d); want a new pid, the same ports",
			s.PID(), pid, s.Portal(), portal, s.ControlPort(), ctl)
	}
	select {
	case <-s.Done():
		t.Fatal("Done is closed after a successful Restart")
	default:
	}
	after, err := s.Show(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("configuration differs after Restart:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := readAt(t, s.LUNPath(iqn, 1), 7<<20, 1<<20); !bytes.Equal(got, bytes.Repeat([]byte{0xc5}, 1<<20)) {
		t.Error("backing file of LUN 1 lost data written before the crash")
	}
	mustQemuIO(t, iscsiURL(s, iqn, 1), "read -P 0x5c 0 1M", "read -P 0xc5 7M 1M", "write -P 0x77 1M 64k", "read -P 0x77 1M 64k")
	mustQemuIO(t, iscsiURL(s, iqn, 2), "read -P 0x3d 8k 64k")
	mustQemuIO(t, "iscsi://carol%carolsecret12@"+s.Portal()+"/"+chapIQN+"/1", "write -P 0x11 0 4k", "read -P 0x11 0 4k")
	syncCounts(t, s)
	if c := s.Commands(1, OpWrite10); c.Done == 0 {
		t.Errorf("the new tgtd traced no WRITE(10): %+v", c)
	}

	// A second restart works as well; Close afterwards reports no crash.
	if err := s.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	mustQemuIO(t, iscsiURL(s, iqn, 1), "read -P 0x77 1M 64k")
}

func TestRestartRefusesAfterCrashOrClose(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.cur().cmd.Process.Signal(syscall.SIGKILL)
	<-s.Done()
	if err := s.Restart(ctx, 0); err == nil || !strings.Contains(err.Error(), "exited on its own") {
		t.Errorf("Restart after a crash: %v, want an error naming the crash", err)
	}
	s.Close()
	s.closeErr = nil // the crash was the point
	if err := s.Restart(ctx, 0); err == nil {
		t.Error("Restart after Close succeeded")
	}
}

// TestDropConnections closes the connection of a live qemu-io session;
// libiscsi then logs in again, which tgt shows as a session with another
// TSIH.
func TestDropConnections(t *testing.T) {
	s := Start(t)
	qemu := needTool(t, "qemu-io", "qemu-utils qemu-block-extra")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if n, err := s.DropConnections(ctx, s.IQN()); err != nil || n != 0 {
		t.Fatalf("DropConnections without sessions: %d, %v", n, err)
	}
	cmd := exec.CommandContext(ctx, qemu, "-f", "raw", "-c", "read 0 4k", "-c", "sleep 4000", "-c", "read 0 4k", iscsiURL(s, s.IQN(), 1))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var conns []Connection
	for len(conns) == 0 {
		var err error
		if conns, err = s.Connections(ctx, s.IQN()); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("qemu-io never logged in")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(conns) != 1 || conns[0].Initiator == "" || conns[0].Address != "127.0.0.1" {
		t.Fatalf("connections %+v, want qemu-io's one", conns)
	}
	ss, err := s.Sessions(ctx, s.IQN())
	if err != nil || len(ss) != 1 || uint16(ss[0].Nexus) != conns[0].TSIH || ss[0].ISID == ([6]byte{}) {
		t.Fatalf("sessions %+v (%v), want one with TSIH %d and its ISID", ss, err, conns[0].TSIH)
	}
	n, err := s.DropConnections(ctx, s.IQN())
	if err != nil || n != 1 {
		t.Fatalf("DropConnections: %d, %v; want 1", n, err)
	}
	for {
		now, err := s.Connections(ctx, s.IQN())
		if err != nil {
			t.Fatal(err)
		}
		if len(now) == 0 || now[0].TSIH != conns[0].TSIH {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("session %d still has its connection after DropConnections", conns[0].TSIH)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.DropConnections(ctx, "iqn.2024-01.io.iser-attach.test:nope"); err == nil {
		t.Error("DropConnections of an unknown target: no error")
	}
}

func TestParseConnections(t *testing.T) {
	// Captured from tgtadm 1.0.85 (--mode connection --op show --tid 1).
	const show = "Session: 1\n    Connection: 0\n        Initiator: iqn.2008-11.org.linux-kvm\n        IP Address: 127.0.0.1\n" +
		"Session: 7\n    Connection: 3\n        Initiator: iqn.x:y\n        IP Address: 127.0.0.2\n"
	got, err := parseConnections(show)
	if err != nil {
		t.Fatal(err)
	}
	want := []Connection{{TSIH: 1, CID: 0, Initiator: "iqn.2008-11.org.linux-kvm", Address: "127.0.0.1"},
		{TSIH: 7, CID: 3, Initiator: "iqn.x:y", Address: "127.0.0.2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got, err := parseConnections(""); err != nil || len(got) != 0 {
		t.Errorf("no connections: %+v, %v", got, err)
	}
}

func TestStall(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	state := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.PID()))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) S ...
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return f[0]
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Stall(ctx, 500*time.Millisecond) }()
	deadline := time.Now().Add(400 * time.Millisecond)
	for state() != "T" {
		if time.Now().After(deadline) {
			t.Fatalf("tgtd state %s during Stall, want T (stopped)", state())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("Stall returned after %v", d)
	}
	if st := state(); st == "T" {
		t.Errorf("tgtd still stopped after Stall")
	}
	mustQemuIO(t, iscsiURL(s, s.IQN(), 1), "write -P 0x42 0 4k", "read -P 0x42 0 4k")
}

func TestTraceSessionISID(t *testing.T) {
	tr := newTracer()
	// Captured from tgtd 1.0.85 -d 1 (a libiscsi login): sid64(isid, tsih).
	tr.line("tgtd: session_create(148) session_create: 0x20000b8853580")
	isid, ok := tr.isid(2)
	if want := [6]byte{0x80, 0x35, 0x85, 0xb8, 0, 0}; !ok || isid != want {
		t.Errorf("ISID of TSIH 2: %x, %v; want %x", isid, ok, want)
	}
	if _, ok := tr.isid(1); ok {
		t.Error("an ISID for a TSIH never created")
	}
	want := uint16(256) // on a little-endian host
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		want = 1
	}
	if got := (Session{Nexus: 1}).WireTSIH(); got != want {
		t.Errorf("WireTSIH of I_T nexus 1 = %d, want %d", got, want)
	}
}
