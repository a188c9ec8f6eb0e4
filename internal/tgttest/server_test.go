package tgttest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartShowStop(t *testing.T) {
	s := Start(t,
		Target{IQN: "iqn.2024-01.io.iser-attach.test:a", LUNs: []LUN{{Size: 8 << 20}, {Size: 1 << 20, BlockSize: 4096}}},
		Target{IQN: "iqn.2024-01.io.iser-attach.test:b"},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := s.Show(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Target 1: iqn.2024-01.io.iser-attach.test:a",
		"Target 2: iqn.2024-01.io.iser-attach.test:b",
		"Backing store path: " + s.LUNPath("iqn.2024-01.io.iser-attach.test:a", 2),
		"Block size: 4096",
		"Type: controller",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tgtadm show lacks %q:\n%s", want, out)
		}
	}
	if fi, err := os.Stat(s.LUNPath("iqn.2024-01.io.iser-attach.test:a", 1)); err != nil || fi.Size() != 8<<20 {
		t.Errorf("backing file of LUN 1: %v, %v", fi, err)
	}
	conn, err := net.DialTimeout("tcp", s.Portal(), 5*time.Second)
	if err != nil {
		t.Fatalf("portal %s: %v", s.Portal(), err)
	}
	conn.Close()

	pid := s.PID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("tgtd pid %d still exists after Close (kill 0: %v)", pid, err)
	}
	sock := filepath.Join(ipcDir, "socket."+strconv.Itoa(s.ControlPort()))
	for _, p := range []string{sock, sock + ".lock"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	if c, err := net.DialTimeout("tcp", s.Portal(), time.Second); err == nil {
		c.Close()
		t.Errorf("portal %s still accepts connections after Close", s.Portal())
	}
}

func TestSeveralServers(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Portal() == b.Portal() || a.ControlPort() == b.ControlPort() {
		t.Fatalf("two servers share %s / %d", a.Portal(), a.ControlPort())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []*Server{a, b} {
		out, err := s.Tgtadm(ctx, "--mode", "portal", "--op", "show")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(out), "Portal: "+s.Portal()+",1"; got != want {
			t.Errorf("portals: got %q, want %q", got, want)
		}
	}
}

func TestCloseReportsCrash(t *testing.T) {
	s := Start(t)
	s.cur().cmd.Process.Signal(syscall.SIGKILL)
	<-s.Done()
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "exited before Close") {
		t.Errorf("Close after tgtd died: %v, want an 'exited before Close' error", err)
	}
	s.closeErr = nil // the crash was the point of this test; keep Cleanup quiet
}

// A port taken between freePort and tgtd's bind makes tgtd fall back to
// 0.0.0.0:3260; Launch must notice and retry on another port.
func TestPortClashRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return busy, nil
		}
		return freePort()
	}
	defer func() { pickPort = freePort }()
	s := Start(t)
	if calls < 2 || s.Portal() == l.Addr().String() {
		t.Errorf("Launch used port %s after %d picks; want a retry past busy port %d", s.Portal(), calls, busy)
	}
}
