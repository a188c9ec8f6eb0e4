//go:build cgo

package rdma

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// The binary must start without rdma-core: it may not link it.
func TestNotLinkedAgainstRDMACore(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.Contains(l, "ibverbs") || strings.Contains(l, "rdmacm") {
			t.Errorf("test binary links %s; rdma-core must be loaded with dlopen", l)
		}
	}
}

func TestLoadMissingLibrary(t *testing.T) {
	for _, names := range [][2]string{
		{"libibverbs-missing.so.1", libCM},
		{libVerbs, "librdmacm-missing.so.1"},
	} {
		err := loadLibraries(names[0], names[1])
		if !errors.Is(err, ErrLibraryMissing) {
			t.Fatalf("load %v: got %v, want ErrLibraryMissing", names, err)
		}
		if !strings.Contains(err.Error(), "-missing.so.1") || !strings.Contains(err.Error(), "apt-get install ibverbs-providers librdmacm1") {
			t.Errorf("error %q should name the library and what to install", err)
		}
	}
	// A library without the symbols the shim needs.
	err := loadLibraries("libc.so.6", libCM)
	if !errors.Is(err, ErrLibraryMissing) || !strings.Contains(err.Error(), "symbol ibv_alloc_pd not found") {
		t.Errorf("load libc as libibverbs: got %v", err)
	}
}

// requireRDMACore fails (not skips) where rdma-core should be: the host
// builds against libibverbs-dev, so its runtime libraries are there too.
func requireRDMACore(t *testing.T) {
	t.Helper()
	if err := load(); err != nil {
		t.Fatalf("%v (the build needs libibverbs-dev and librdmacm-dev, which pull them in)", err)
	}
}

func TestWCStatusStringsMatchLibibverbs(t *testing.T) {
	requireRDMACore(t)
	for s := WCSuccess; s <= WCTMRndvIncomplete; s++ {
		if got, want := s.String(), wcStatusStr(s); got != want {
			t.Errorf("WCStatus(%d) = %q, ibv_wc_status_str says %q", s, got, want)
		}
	}
}

// Without RDMA devices (the host kernel has none) Dial and Listen must fail
// cleanly and fast, not hang or crash.
func TestNoDeviceErrors(t *testing.T) {
	requireRDMACore(t)
	if _, err := os.Stat("/dev/infiniband/rdma_cm"); err == nil {
		t.Skip("this machine has RDMA; the VM tests cover it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, "127.0.0.1:3260", DialOptions{}); err == nil {
		c.Close()
		t.Fatal("Dial succeeded without RDMA devices")
	} else if !strings.HasPrefix(err.Error(), "rdma dial 127.0.0.1:3260: ") {
		t.Errorf("Dial error %q does not name the operation", err)
	}
	if l, err := Listen("127.0.0.1:3260", DialOptions{}); err == nil {
		l.Close()
		t.Fatal("Listen succeeded without RDMA devices")
	}
	if _, err := Dial(ctx, "127.0.0.1:3260", DialOptions{PrivateData: make([]byte, 57)}); err == nil ||
		!strings.Contains(err.Error(), "exceeds 56") {
		t.Errorf("oversized private data: %v", err)
	}
}
