package nbd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

func TestGeometry(t *testing.T) {
	tests := []struct {
		name             string
		cfg              nbdtest.Config
		min, pref, chunk uint32
		flags            uint16
		wantErr          string
	}{
		{name: "512e disk", cfg: nbdtest.Config{Size: 1 << 30, BlockSize: 512, PreferredBlockSize: 4096, MaxTransfer: 1 << 20},
			min: 512, pref: 4096, chunk: 1 << 20,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendTrim | flagSendWriteZeroes},
		{name: "4Kn, odd preferred rounds down", cfg: nbdtest.Config{Size: 1 << 30, BlockSize: 4096, PreferredBlockSize: 3 * 65536},
			min: 4096, pref: 131072, chunk: 32 << 20,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendTrim | flagSendWriteZeroes},
		{name: "preferred below minimum", cfg: nbdtest.Config{Size: 1 << 20, BlockSize: 4096, PreferredBlockSize: 512},
			min: 4096, pref: 4096, chunk: 32 << 20,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendTrim | flagSendWriteZeroes},
		{name: "huge preferred capped", cfg: nbdtest.Config{Size: 1 << 20, BlockSize: 512, PreferredBlockSize: 1 << 31},
			min: 512, pref: 32 << 20, chunk: 32 << 20,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendTrim | flagSendWriteZeroes},
		{name: "max transfer not a block multiple", cfg: nbdtest.Config{Size: 1 << 20, BlockSize: 4096, MaxTransfer: 10000},
			min: 4096, pref: 4096, chunk: 8192,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendTrim | flagSendWriteZeroes},
		{name: "max transfer below a block", cfg: nbdtest.Config{Size: 1 << 20, BlockSize: 4096, MaxTransfer: 1000},
			min: 4096, pref: 4096, chunk: 4096,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendTrim | flagSendWriteZeroes},
		{name: "read-only hides trim and zero", cfg: nbdtest.Config{Size: 1 << 20, ReadOnly: true},
			min: 512, pref: 4096, chunk: 32 << 20,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagReadOnly},
		{name: "no trim", cfg: nbdtest.Config{Size: 1 << 20, NoTrim: true},
			min: 512, pref: 4096, chunk: 32 << 20,
			flags: flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendWriteZeroes},
		{name: "block size not a power of two", cfg: nbdtest.Config{Size: 3 * 520, BlockSize: 520}, wantErr: "power of two"},
		{name: "block size too big", cfg: nbdtest.Config{Size: 1 << 20, BlockSize: 128 << 10}, wantErr: "power of two"},
		{name: "size not a block multiple", cfg: nbdtest.Config{Size: 1000, BlockSize: 512}, wantErr: "multiple"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := geometryOf(nbdtest.NewMemory(tt.cfg))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.minBlock != tt.min || g.prefBlock != tt.pref || g.maxBlock != 32<<20 || g.chunk != tt.chunk || g.flags != tt.flags {
				t.Fatalf("got min %d pref %d max %d chunk %d flags %#x", g.minBlock, g.prefBlock, g.maxBlock, g.chunk, g.flags)
			}
		})
	}
}

func TestErrnoOf(t *testing.T) {
	tests := []struct {
		err          error
		shuttingDown bool
		want         uint32
	}{
		{nil, false, 0},
		{syscall.EIO, false, errIO},
		{syscall.Errno(0), false, errIO},
		{syscall.EACCES, false, errPerm},
		{syscall.EFBIG, false, errNoSpc},
		{syscall.EOVERFLOW, false, errOverflow},
		{syscall.EOPNOTSUPP, false, errNotSup},
		{syscall.ESHUTDOWN, false, errShutdown},
		{syscall.EBUSY, false, errIO},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", syscall.ENOMEM)), false, errNoMem},
		{errnoErr{syscall.EPERM}, false, errPerm},
		{context.Canceled, true, errShutdown},
		{fmt.Errorf("scsi: %w", context.DeadlineExceeded), true, errShutdown},
		{context.Canceled, false, errIO},
		{errors.New("x"), true, errIO},
	}
	for _, tt := range tests {
		if got := errnoOf(tt.err, tt.shuttingDown); got != tt.want {
			t.Errorf("errnoOf(%v, %v) = %d, want %d", tt.err, tt.shuttingDown, got, tt.want)
		}
	}
}

func TestNewServerRejects(t *testing.T) {
	good, _ := memExport("a", nbdtest.Config{Size: 1 << 20})
	tests := []struct {
		name    string
		exports []Export
		want    string
	}{
		{"none", nil, "no exports"},
		{"nil backend", []Export{{Name: "x"}}, "no backend"},
		{"duplicate", []Export{good, good}, "duplicate"},
		{"long name", []Export{{Name: strings.Repeat("n", 4097), Backend: good.Backend}}, "4096"},
		{"bad geometry", []Export{{Name: "g", Backend: nbdtest.NewMemory(nbdtest.Config{Size: 100})}}, "multiple"},
	}
	for _, tt := range tests {
		if _, err := NewServer(tt.exports, Options{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestListen(t *testing.T) {
	dir, err := os.MkdirTemp("", "nbdl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")

	l, err := Listen("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix:" + sock); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Errorf("second listener on a live socket: %v", err)
	}
	// A socket file left behind by a dead server is replaced.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	l, err = Listen("unix:" + sock)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	l.Close()

	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix:" + sock); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("listen over a regular file: %v", err)
	}

	l, err = Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr().Network() != "tcp" {
		t.Errorf("tcp listener on %s", l.Addr().Network())
	}
	l.Close()

	for _, bad := range []string{"", "unix:", "tcp", "udp:1.2.3.4:5", "/tmp/sock", "tcp:256.0.0.1:1"} {
		if l, err := Listen(bad); err == nil {
			l.Close()
			t.Errorf("Listen(%q) succeeded", bad)
		}
	}
}

func TestServeAfterClose(t *testing.T) {
	e, _ := memExport("a", nbdtest.Config{Size: 1 << 20})
	s, err := NewServer([]Export{e}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	l, err := Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background(), l); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Fatal("Serve after Close left the listener open")
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after Close: %v", err)
	}
}

func TestLoopback(t *testing.T) {
	for spec, want := range map[string]bool{
		"unix:/run/x.sock":         true,
		"tcp:127.0.0.1:10809":      true,
		"tcp:127.1.2.3:0":          true,
		"tcp:[::1]:10809":          true,
		"tcp:[::ffff:127.0.0.1]:1": true,
		"tcp:localhost:10809":      true,
		"tcp::10809":               false,
		"tcp:0.0.0.0:10809":        false,
		"tcp:[::]:10809":           false,
		"tcp:192.168.1.5:10809":    false,
		"tcp:nbd.example:10809":    false,
	} {
		got, err := Loopback(spec)
		if err != nil || got != want {
			t.Errorf("Loopback(%q) = %v, %v; want %v", spec, got, err, want)
		}
	}
	for _, bad := range []string{"", "tcp", "tcp:", "tcp:1.2.3.4", "udp:1.2.3.4:5"} {
		if _, err := Loopback(bad); err == nil {
			t.Errorf("Loopback(%q) accepted a malformed spec", bad)
		}
	}
}
