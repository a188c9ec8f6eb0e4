package nbdkernel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/proc/proctest"
)

// leftSys writes a sysfs tree in which nbd index is configured by pid
// with backend b.
func leftSys(t *testing.T, index int, pid, b string) string {
	t.Helper()
	sys := t.TempDir()
	dir := filepath.Join(sys, "nbd"+strconv.Itoa(index))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if pid != "" {
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(pid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "backend"), []byte(b+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return sys
}

// A device whose server is dead is disconnected; one whose server lives,
// one sysfs does not name a server of, and one another backend
// configured are left alone; a device still held open after the
// disconnect is reported, not waited for past ctx.
func TestRemoveLeftDevice(t *testing.T) {
	dead := strconv.Itoa(proctest.Exited(t))
	const backend = "iser-attach:db"
	newKernel := func() *fakeKernel {
		k := newFakeKernel()
		k.devices[3] = &fakeDevice{index: 3, connected: true, backend: backend}
		return k
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	k := newKernel()
	if err := remove(ctx, k, leftSys(t, 3, dead, backend), 3, backend); err != nil {
		t.Fatalf("remove a dead server's device: %v", err)
	}
	if d := k.devices[3]; d.disconnects != 1 || d.connected {
		t.Fatalf("after remove: %d disconnects, connected %v; want 1, false", d.disconnects, d.connected)
	}

	for _, tc := range []struct {
		name, pid, backend, want string
		served                   bool
	}{
		{name: "server alive", pid: strconv.Itoa(os.Getpid()), backend: backend, served: true},
		{name: "server unnamed", pid: "?", backend: backend, served: true},
		{name: "another backend", pid: dead, backend: "qemu-nbd", want: `configured by "qemu-nbd", not "iser-attach:db"`},
	} {
		k := newKernel()
		err := remove(ctx, k, leftSys(t, 3, tc.pid, tc.backend), 3, backend)
		if err == nil || errors.Is(err, ErrServed) != tc.served || !strings.Contains(err.Error(), tc.want) ||
			!strings.HasPrefix(err.Error(), "nbd remove /dev/nbd3: ") {
			t.Errorf("%s: remove: %v", tc.name, err)
		}
		if n := k.devices[3].disconnects; n != 0 {
			t.Errorf("%s: %d disconnects; want none", tc.name, n)
		}
	}

	// Not configured (no pid file): nothing to do, nothing sent.
	k = newKernel()
	if err := remove(ctx, k, leftSys(t, 3, "", backend), 3, backend); err != nil || len(k.cmds()) != 0 {
		t.Fatalf("remove of an unconfigured device: %v, commands %v", err, k.cmds())
	}

	// Held open: the kernel keeps it configured after the disconnect.
	k = newKernel()
	k.connected[3] = true
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	err := remove(short, k, leftSys(t, 3, dead, backend), 3, backend)
	if !errors.Is(err, ErrHeldOpen) || k.devices[3].disconnects != 1 {
		t.Fatalf("remove of a device held open: %v (%d disconnects)", err, k.devices[3].disconnects)
	}
}

func TestConfigured(t *testing.T) {
	old := sysBlock
	t.Cleanup(func() { sysBlock = old })
	sysBlock = leftSys(t, 2, "1234", "iser-attach:db")
	if !Configured(2, "iser-attach:db") || Configured(2, "iser-attach:web") || Configured(1, "iser-attach:db") {
		t.Fatal("Configured does not follow sysfs's pid and backend")
	}
	sysBlock = leftSys(t, 2, "", "iser-attach:db")
	if Configured(2, "iser-attach:db") {
		t.Fatal("a device without a pid file is not configured")
	}
}
