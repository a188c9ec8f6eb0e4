package nbdkernel

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

func newServer(t *testing.T, cfg nbdtest.Config) (*nbd.Server, *nbdtest.Memory) {
	t.Helper()
	mem := nbdtest.NewMemory(cfg)
	srv, err := nbd.NewServer([]nbd.Export{{Name: "lun0", Backend: mem}}, nbd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, mem
}

// checkFDs fails the test if it ends with more open fds than it began with.
func checkFDs(t *testing.T) {
	t.Helper()
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := count()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for count() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := count(); n > before {
			t.Errorf("%d fds leaked", n-before)
		}
	})
}

func noSync(string) error { return nil }

func TestAttachServesThroughDriverSockets(t *testing.T) {
	checkFDs(t)
	srv, mem := newServer(t, nbdtest.Config{Size: 8 << 20, BlockSize: 512})
	k := newFakeKernel()
	ctx := context.Background()
	synced := 0
	d, err := attach(ctx, k, func(p string) error {
		if p != "/dev/nbd0" {
			t.Errorf("sync of %s", p)
		}
		synced++
		return nil
	}, srv, "lun0", Options{Index: AnyIndex, Connections: 4, Timeout: 1500 * time.Millisecond,
		DeadConnTimeout: 2 * time.Second, BackendID: "iser-attach:lun0"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Path() != "/dev/nbd0" || d.Index() != 0 {
		t.Fatalf("device %s index %d", d.Path(), d.Index())
	}
	fd := k.device(t, 0)
	wantFlags := uint64(flagHasFlags | flagSendFlush | flagSendFUA | flagSendTrim | flagSendWriteZeroes | flagCanMultiConn)
	if fd.size != 8<<20 || fd.bs != 512 || fd.flags != wantFlags || len(fd.socks) != 4 ||
		fd.timeout != 2 || fd.deadConn != 2 || fd.backend != "iser-attach:lun0\x00" {
		t.Fatalf("driver configured size %d bs %d flags %#x socks %d timeout %d dead %d backend %q",
			fd.size, fd.bs, fd.flags, len(fd.socks), fd.timeout, fd.deadConn, fd.backend)
	}

	// Every socket reaches the export, with every command the driver sends.
	data := bytes.Repeat([]byte("iser-attach!"), 4096/12+1)[:4096]
	for s := range 4 {
		off := uint64(s) * 65536
		typ := uint32(nbdCmdWrite)
		if s == 3 {
			typ |= nbdCmdFlagFUA
		}
		if errno, _, err := fd.do(s, typ, off, 4096, data); err != nil || errno != 0 {
			t.Fatalf("socket %d write: errno %d, %v", s, errno, err)
		}
		errno, got, err := fd.do((s+1)%4, nbdCmdRead, off, 4096, nil)
		if err != nil || errno != 0 || !bytes.Equal(got, data) {
			t.Fatalf("socket %d read back: errno %d, %v, equal %v", (s+1)%4, errno, err, bytes.Equal(got, data))
		}
	}
	for _, c := range []struct {
		typ uint32
		off uint64
		n   uint32
	}{{nbdCmdFlush, 0, 0}, {nbdCmdTrim, 0, 4096}, {nbdCmdWriteZeroes, 65536, 4096}} {
		if errno, _, err := fd.do(1, c.typ, c.off, c.n, nil); err != nil || errno != 0 {
			t.Fatalf("command %d: errno %d, %v", c.typ, errno, err)
		}
	}
	// A misaligned write gets EINVAL and the stream stays in step.
	if errno, _, err := fd.do(2, nbdCmdWrite, 100, 512, make([]byte, 512)); err != nil || errno != uint32(syscall.EINVAL) {
		t.Fatalf("misaligned write: errno %d, %v", errno, err)
	}
	st := mem.Stats()
	if st.Writes != 4 || st.FUAWrites != 1 || st.Flushes != 1 || st.Trims != 1 || st.WriteZeroes != 1 || st.Violations != 0 {
		t.Fatalf("backend saw %+v", st)
	}
	if b := mem.Bytes(); !bytes.Equal(b[131072:135168], data) || !bytes.Equal(b[65536:69632], make([]byte, 4096)) {
		t.Fatal("backend contents differ from what was written")
	}

	if err := d.Detach(ctx); err != nil {
		t.Fatalf("detach: %v", err)
	}
	select {
	case <-d.Done():
	default:
		t.Fatal("Done open after Detach")
	}
	if synced != 1 || fd.disconnects != 1 {
		t.Fatalf("detach synced %d times, disconnected %d times", synced, fd.disconnects)
	}
	want := []uint8{cmdConnect, cmdDisconnect, cmdStatus}
	if got := k.cmds(); !bytes.Equal(got, want) {
		t.Fatalf("netlink commands %v, want %v", got, want)
	}
	if err := d.Close(); err != nil || d.Detach(ctx) != nil {
		t.Fatalf("second Close/Detach: %v", err)
	}
	if got := k.cmds(); len(got) != 3 {
		t.Fatalf("a second Close sent more commands: %v", got)
	}
	if d.Err() != nil {
		t.Fatalf("connection errors: %v", d.Err())
	}
}

func TestAttachReadOnly(t *testing.T) {
	srv, _ := newServer(t, nbdtest.Config{Size: 1 << 20, BlockSize: 4096})
	k := newFakeKernel()
	d, err := attach(context.Background(), k, noSync, srv, "", Options{Index: 5, Connections: 1, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fd := k.device(t, 5)
	if d.Path() != "/dev/nbd5" || fd.bs != 4096 ||
		fd.flags != flagHasFlags|flagReadOnly|flagSendFlush|flagSendFUA|flagCanMultiConn {
		t.Fatalf("%s: bs %d flags %#x", d.Path(), fd.bs, fd.flags)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAttachReadOnlyExport: an export served read-only (nbd.Export
// ReadOnly) reaches the kernel with NBD_FLAG_READ_ONLY and without TRIM
// or WRITE_ZEROES, with no ReadOnly option: the kernel makes the device
// read-only, and the server refuses what writes still come.
func TestAttachReadOnlyExport(t *testing.T) {
	mem := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20, BlockSize: 4096})
	srv, err := nbd.NewServer([]nbd.Export{{Name: "lun0", Backend: mem, ReadOnly: true}}, nbd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	k := newFakeKernel()
	d, err := attach(context.Background(), k, noSync, srv, "lun0", Options{Index: 6, Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if fd := k.device(t, 6); fd.flags != flagHasFlags|flagReadOnly|flagSendFlush|flagSendFUA|flagCanMultiConn {
		t.Fatalf("%s: flags %#x", d.Path(), fd.flags)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAttachUnsupported(t *testing.T) {
	checkFDs(t)
	srv, _ := newServer(t, nbdtest.Config{Size: 1 << 20})
	k := newFakeKernel()
	k.missing = true
	_, err := attach(context.Background(), k, noSync, srv, "lun0", Options{Index: AnyIndex})
	var ue *UnsupportedError
	if !errors.Is(err, ErrNotSupported) || !errors.As(err, &ue) || !errors.Is(err, syscall.ENOENT) ||
		!strings.Contains(err.Error(), "modprobe nbd") {
		t.Fatalf("attach without the nbd family: %v", err)
	}
}

func TestAttachBusyCleansUp(t *testing.T) {
	checkFDs(t)
	srv, _ := newServer(t, nbdtest.Config{Size: 1 << 20})
	k := newFakeKernel()
	k.connected[2] = true
	_, err := attach(context.Background(), k, noSync, srv, "lun0", Options{Index: 2, Connections: 3})
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "NBD_CMD_CONNECT") {
		t.Fatalf("attach of a busy device: %v", err)
	}
	// The server has no connection left: Shutdown returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("server still serving the failed attach's sockets: %v", err)
	}
}

func TestAttachRejectsOptions(t *testing.T) {
	srv, _ := newServer(t, nbdtest.Config{Size: 1 << 20, BlockSize: 1024})
	k := newFakeKernel()
	for _, o := range []Options{
		{Index: -2},
		{Connections: -1},
		{Connections: 65},
		{BlockSize: 512},  // smaller than the export's blocks
		{BlockSize: 1536}, // not a power of two
		{BlockSize: uint32(os.Getpagesize()) * 2},
		{Size: 1<<20 + 1024},
		{Size: 1000},
		{Timeout: -time.Second},
	} {
		if _, err := attach(context.Background(), k, noSync, srv, "lun0", o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := attach(context.Background(), k, noSync, srv, "nope", Options{}); err == nil {
		t.Error("unknown export accepted")
	}
	if got := k.cmds(); len(got) != 0 {
		t.Fatalf("rejected options reached the driver: %v", got)
	}
}

func TestOptionsDefaults(t *testing.T) {
	info := nbd.ExportInfo{Name: "x", Size: 10<<20 + 256, BlockSize: 256,
		TransmissionFlags: nbd.FlagHasFlags | nbd.FlagSendFlush | nbd.FlagCanMultiConn | 1<<9 /* SEND_RESIZE */}
	cfg, err := Options{Index: AnyIndex, Timeout: time.Millisecond}.config(info)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.blockSizeBytes != 512 || cfg.sizeBytes != 10<<20 || cfg.timeoutSec != 1 || cfg.deadConnSec != 0 ||
		cfg.serverFlags != flagHasFlags|flagSendFlush|flagCanMultiConn || len(cfg.fds) < 1 || len(cfg.fds) > 4 {
		t.Fatalf("defaults: %+v", cfg)
	}
	info.TransmissionFlags &^= nbd.FlagCanMultiConn
	if _, err := (Options{Connections: 2}).config(info); err == nil {
		t.Fatal("two connections without multi-conn accepted")
	}
}

// A Detach whose ctx ends while a backend call hangs returns ctx's error,
// and the device's goroutines end once the call returns.
func TestDetachGivesUpOnHungBackend(t *testing.T) {
	checkFDs(t)
	srv, mem := newServer(t, nbdtest.Config{Size: 1 << 20})
	k := newFakeKernel()
	d, err := attach(context.Background(), k, noSync, srv, "lun0", Options{Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{})
	mem.SetHook(func(ctx context.Context, op nbdtest.Op, off, length int64) error {
		if op == nbdtest.OpWrite {
			close(entered)
			<-release
		}
		return nil
	})
	fd := k.device(t, 0)
	go fd.do(0, nbdCmdWrite, 0, 512, make([]byte, 512)) // its reply never comes: disconnect shuts the socket
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = d.Detach(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("detach with a hung backend: %v after %v", err, time.Since(start))
	}
	select {
	case <-d.Done():
		t.Fatal("Done closed while a backend call runs")
	default:
	}
	if err2 := d.Close(); err2 != err {
		t.Fatalf("Close after Detach: %v, want Detach's %v", err2, err)
	}
	close(release)
	select {
	case <-d.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection goroutine did not end after the backend call returned")
	}
}

// abandonedConnect lets the driver configure the device, then reports the
// request as timed out, as when ctx ends between the kernel's work and its
// reply.
type abandonedConnect struct{ *fakeKernel }

func (a abandonedConnect) request(ctx context.Context, family uint16, cmd, version uint8, attrs []byte) ([]byte, error) {
	reply, err := a.fakeKernel.request(ctx, family, cmd, version, attrs)
	if family == a.family && cmd == cmdConnect && err == nil {
		return nil, context.DeadlineExceeded
	}
	return reply, err
}

func TestAttachAbandonedConnectDisconnects(t *testing.T) {
	checkFDs(t)
	srv, _ := newServer(t, nbdtest.Config{Size: 1 << 20})
	k := newFakeKernel()
	_, err := attach(context.Background(), abandonedConnect{k}, noSync, srv, "lun0", Options{Index: 6, Connections: 2})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("attach: %v", err)
	}
	if fd := k.device(t, 6); fd.connected || fd.disconnects != 1 {
		t.Fatalf("abandoned nbd6: connected %v after %d disconnects", fd.connected, fd.disconnects)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("server still serving the failed attach's sockets: %v", err)
	}
}
