package ublk

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The lab tests run in the VM lab guest (scripts/vmlab/tests/70-ublk.sh) as
// root with ublk_drv loaded: UBLK_LAB=1 bin/ublk.test -test.run '^TestLab'.
// There a missing driver or feature fails them; elsewhere they skip.
func labSetup(t *testing.T) {
	t.Helper()
	if os.Getenv("UBLK_LAB") == "" {
		t.Skip("lab test: set UBLK_LAB=1 in a guest with ublk_drv (scripts/vmlab/tests/70-ublk.sh; try: modprobe ublk_drv)")
	}
	if err := Supported(); err != nil {
		t.Fatalf("ublk not usable in the lab guest: %v", err)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (m *memBackend) counts() (flushes, fua, trims, zeroes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.flushes, m.fuaWrites, m.trims, m.zeroCalls
}

func (m *memBackend) snapshot(off, n int64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.data[off:off+n]...)
}

func (m *memBackend) setFail(from, to int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failFrom, m.failTo = from, to
}

func createLab(t *testing.T, b Backend, opt DeviceOptions) *Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := Create(ctx, b, opt)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Logf("serving %s (%+v)", d.BlockPath(), d.Info())
	if fi, err := os.Stat(d.BlockPath()); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("%s: %v %v", d.BlockPath(), fi, err)
	}
	return d
}

func TestLabDevice(t *testing.T) {
	labSetup(t)
	labDevice(t, DeviceOptions{}, func(m *memBackend) Backend { return m })
}

// The per-request protocol (FETCH_REQ, COMMIT_AND_FETCH_REQ) where the
// kernel offers UBLK_F_BATCH_IO, which the other lab tests then use.
func TestLabDevicePerRequest(t *testing.T) {
	labSetup(t)
	if Probe(context.Background()).Features&FlagBatchIO == 0 {
		t.Skip("no UBLK_F_BATCH_IO: every lab test serves one request per command")
	}
	labDevice(t, DeviceOptions{NoBatch: true}, func(m *memBackend) Backend {
		a := newAsyncMem(m)
		t.Cleanup(a.close)
		return a
	})
}

// The same through the asynchronous path (blockdev.Async), which an
// initiator.LUN takes: reads and writes start on the queue's thread and
// end on the backend's completion goroutine.
func TestLabDeviceAsync(t *testing.T) {
	labSetup(t)
	labDevice(t, DeviceOptions{}, func(m *memBackend) Backend {
		a := newAsyncMem(m)
		t.Cleanup(a.close)
		return a
	})
}

// labDevice serves a 128 MiB memory disk on two queues and puts it through
// dd, a filesystem, flushes, FUA, discard and write-zeroes. opt adds to the
// device's options. Batch I/O is used exactly where the kernel offers it
// and opt does not turn it off.
func labDevice(t *testing.T, opt DeviceOptions, wrap func(*memBackend) Backend) {
	const size = 128 << 20
	m := newMemBackend(size, 512)
	opt.Queues, opt.QueueDepth, opt.WriteCache, opt.FUA = 2, 32, true, true
	d := createLab(t, wrap(m), opt)
	defer d.Close()
	offered, used := d.Features()&FlagBatchIO != 0, d.Info().Flags&FlagBatchIO != 0
	t.Logf("UBLK_F_BATCH_IO offered %v, used %v", offered, used)
	if used != (offered && !opt.NoBatch) {
		t.Fatalf("UBLK_F_BATCH_IO offered %v, NoBatch %v: the device uses it: %v", offered, opt.NoBatch, used)
	}
	dev := d.BlockPath()
	tmp := t.TempDir()

	t.Run("sysfs", func(t *testing.T) {
		name := filepath.Base(dev)
		for f, want := range map[string]string{
			"size":                     fmt.Sprint(size / 512),
			"queue/logical_block_size": "512",
			"queue/max_sectors_kb":     "512",
			"queue/write_cache":        "write back",
			"queue/fua":                "1",
			"queue/discard_max_bytes":  fmt.Sprint(DefaultMaxDiscardSectors * 512),
		} {
			b, err := os.ReadFile(filepath.Join("/sys/block", name, f))
			if err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s = %q (%v), want %q", f, strings.TrimSpace(string(b)), err, want)
			}
		}
	})

	// SetScheduler moves the device to mq-deadline (the kernel's choice for
	// one hardware queue) and to none, and a name the kernel lacks leaves it
	// where it was, with an error.
	t.Run("scheduler", func(t *testing.T) {
		for _, s := range []string{"mq-deadline", SchedulerNone} {
			if got, err := d.SetScheduler(s); err != nil || got != s {
				t.Fatalf("SetScheduler(%s) = %q, %v", s, got, err)
			}
			b, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "queue/scheduler"))
			if !strings.Contains(string(b), "["+s+"]") {
				t.Fatalf("after SetScheduler(%s) the attribute reads %q", s, b)
			}
		}
		got, err := d.SetScheduler("no-such-scheduler")
		if err == nil || got != SchedulerNone {
			t.Fatalf("SetScheduler of an unknown name = %q, %v; want an error and none still active", got, err)
		}
		t.Logf("unknown scheduler: %v", err)
	})

	t.Run("dd-direct", func(t *testing.T) {
		in := filepath.Join(tmp, "in")
		data := make([]byte, 16<<20)
		rand.Read(data)
		if err := os.WriteFile(in, data, 0o600); err != nil {
			t.Fatal(err)
		}
		run(t, "dd", "if="+in, "of="+dev, "bs=1M", "seek=3", "oflag=direct", "status=none")
		if !bytes.Equal(m.snapshot(3<<20, 16<<20), data) {
			t.Fatal("backend does not hold what dd wrote")
		}
		out := filepath.Join(tmp, "out")
		run(t, "dd", "if="+dev, "of="+out, "bs=1M", "skip=3", "count=16", "iflag=direct", "status=none")
		back, _ := os.ReadFile(out)
		if !bytes.Equal(back, data) {
			t.Fatal("read back differs")
		}
	})

	t.Run("fsync-is-flush", func(t *testing.T) {
		f0, _, _, _ := m.counts()
		run(t, "dd", "if=/dev/zero", "of="+dev, "bs=64k", "count=4", "conv=fsync", "status=none")
		if f1, _, _, _ := m.counts(); f1 <= f0 {
			t.Fatalf("fsync sent no FLUSH to the backend (%d -> %d)", f0, f1)
		}
	})

	t.Run("dsync-is-fua", func(t *testing.T) {
		_, u0, _, _ := m.counts()
		run(t, "dd", "if=/dev/zero", "of="+dev, "bs=4k", "count=8", "oflag=direct,dsync", "status=none")
		if _, u1, _, _ := m.counts(); u1 < u0+8 {
			t.Fatalf("O_DSYNC writes reached the backend without FUA (%d -> %d)", u0, u1)
		}
	})

	t.Run("discard-is-trim", func(t *testing.T) {
		run(t, "dd", "if=/dev/urandom", "of="+dev, "bs=1M", "count=4", "seek=40", "oflag=direct", "status=none")
		_, _, t0, _ := m.counts()
		run(t, "blkdiscard", "-o", fmt.Sprint(40<<20), "-l", fmt.Sprint(4<<20), dev)
		if _, _, t1, _ := m.counts(); t1 <= t0 {
			t.Fatal("blkdiscard did not reach Trim")
		}
		if !bytes.Equal(m.snapshot(40<<20, 4<<20), make([]byte, 4<<20)) {
			t.Fatal("trimmed range not zero in the backend")
		}
	})

	t.Run("zeroout-is-write-zeroes", func(t *testing.T) {
		run(t, "dd", "if=/dev/urandom", "of="+dev, "bs=1M", "count=2", "seek=50", "oflag=direct", "status=none")
		_, _, _, z0 := m.counts()
		run(t, "blkdiscard", "-z", "-o", fmt.Sprint(50<<20), "-l", fmt.Sprint(2<<20), dev)
		if _, _, _, z1 := m.counts(); z1 <= z0 {
			t.Fatal("blkdiscard -z did not reach WriteZeroes")
		}
		if !bytes.Equal(m.snapshot(50<<20, 2<<20), make([]byte, 2<<20)) {
			t.Fatal("zeroed range not zero")
		}
	})

	t.Run("backend-error-is-EIO", func(t *testing.T) {
		m.setFail(60<<20, 61<<20)
		defer m.setFail(0, 0)
		e0 := d.Stats().Errors
		out, err := exec.Command("dd", "if="+dev, "of=/dev/null", "bs=64k", "skip=960", "count=4", "iflag=direct").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Input/output error") {
			t.Fatalf("dd over a failing range: %v\n%s", err, out)
		}
		out, err = exec.Command("dd", "if=/dev/zero", "of="+dev, "bs=64k", "seek=960", "count=4", "oflag=direct").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Input/output error") {
			t.Fatalf("dd write over a failing range: %v\n%s", err, out)
		}
		if d.Stats().Errors <= e0 {
			t.Fatal("errors not counted")
		}
		// The rest of the device still works.
		run(t, "dd", "if="+dev, "of=/dev/null", "bs=64k", "count=4", "iflag=direct", "status=none")
	})

	t.Run("ext4", func(t *testing.T) {
		mnt := filepath.Join(tmp, "mnt")
		os.Mkdir(mnt, 0o755)
		run(t, "mkfs.ext4", "-q", "-F", dev)
		run(t, "mount", dev, mnt)
		files := map[string][]byte{}
		for i := 0; i < 8; i++ {
			b := make([]byte, 100_000+i*123_457)
			rand.Read(b)
			name := filepath.Join(mnt, fmt.Sprintf("f%d", i))
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			files[name] = b
		}
		run(t, "sync")
		run(t, "umount", mnt)
		run(t, "mount", dev, mnt)
		for name, want := range files {
			got, err := os.ReadFile(name)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s after remount: %v (%d bytes, want %d)", name, err, len(got), len(want))
			}
		}
		run(t, "umount", mnt)
		run(t, "e2fsck", "-f", "-n", dev)
	})

	t.Run("fio-verify", func(t *testing.T) {
		run(t, "fio", "--name=verify", "--filename="+dev, "--ioengine=libaio", "--direct=1",
			"--rw=randwrite", "--bs=4k-128k", "--iodepth=32", "--size=32M", "--offset=64M",
			"--verify=crc32c", "--verify_state_save=0", "--output="+filepath.Join(tmp, "fio.txt"))
	})

	st := d.Stats()
	t.Logf("stats %+v", st)
	if st.Reads == 0 || st.Writes == 0 || st.Flushes == 0 || st.Discards == 0 {
		t.Errorf("stats %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-d.Done():
	default:
		t.Fatal("Done still open after Stop")
	}
	if _, err := os.Stat(dev); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after Stop: %v", dev, err)
	}
	if err := d.Close(); err != nil { // idempotent
		t.Errorf("Close after Stop: %v", err)
	}
}

// Detach leaves the device with its I/O held; Recover in the same process
// serves it again and the waiting reader completes with the right data.
func TestLabDetachRecover(t *testing.T) {
	labSetup(t)
	m := newMemBackend(32<<20, 4096)
	rand.Read(m.data)
	d := createLab(t, m, DeviceOptions{QueueDepth: 16})
	id, dev := d.ID(), d.BlockPath()
	if err := d.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	// A read issued while nobody serves the device waits in the kernel.
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command("dd", "if="+dev, "of="+out, "bs=1M", "count=4", "skip=2", "iflag=direct", "status=none")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		t.Fatalf("dd finished while the device had no server: %v", err)
	case <-time.After(time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d2, got := recoverUnder(ctx, t, id, m, cmd, waited, out)
	if !bytes.Equal(got, m.snapshot(2<<20, 4<<20)) {
		t.Fatal("data read through the recovered device differs")
	}
	// A backend of another size is refused.
	if _, err := Recover(ctx, id, newMemBackend(16<<20, 4096), DeviceOptions{}); err == nil {
		t.Fatal("Recover accepted a backend of another size")
	}
	if err := d2.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := Remove(ctx, id); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("Remove of a deleted device: %v, want ENODEV", err)
	}
}

// poolBackend hands the device its own I/O buffers (BufferProvider), as the
// iSER datamover does with its registered pool, and checks that every read
// and write reaches it in those buffers.
type poolBackend struct {
	*memBackend
	pool    []byte
	calls   int
	outside int
}

func (p *poolBackend) IOBuffers(count, size int) ([][]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	bufs := make([][]byte, count)
	for i := range bufs {
		if len(p.pool) < size {
			return nil, errors.New("pool exhausted")
		}
		bufs[i], p.pool = p.pool[:size:size], p.pool[size:]
	}
	return bufs, nil
}

func (p *poolBackend) check(b []byte, base []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lo, hi := uintptrOf(base), uintptrOf(base)+uintptr(len(base))
	if a := uintptrOf(b); a < lo || a+uintptr(len(b)) > hi {
		p.outside++
	}
}

func TestLabBufferProvider(t *testing.T) {
	labSetup(t)
	const depth, queues = 8, 2
	base := make([]byte, depth*queues*DefaultMaxIOBytes)
	p := &poolBackend{memBackend: newMemBackend(32<<20, 512), pool: base}
	b := &checkedPool{p, base}
	d := createLab(t, b, DeviceOptions{Queues: queues, QueueDepth: depth})
	defer d.Close()
	if p.calls != int(d.Info().NrHWQueues) {
		t.Errorf("IOBuffers called %d times for %d queues", p.calls, d.Info().NrHWQueues)
	}
	in := filepath.Join(t.TempDir(), "in")
	data := make([]byte, 4<<20)
	rand.Read(data)
	os.WriteFile(in, data, 0o600)
	run(t, "dd", "if="+in, "of="+d.BlockPath(), "bs=512k", "oflag=direct", "status=none")
	out := filepath.Join(t.TempDir(), "out")
	run(t, "dd", "if="+d.BlockPath(), "of="+out, "bs=512k", "count=8", "iflag=direct", "status=none")
	if back, _ := os.ReadFile(out); !bytes.Equal(back, data) {
		t.Fatal("data differs through provided buffers")
	}
	if p.outside != 0 {
		t.Fatalf("%d reads/writes outside the provided buffers", p.outside)
	}
}

// checkedPool routes ReadAt/WriteAt through poolBackend.check.
type checkedPool struct {
	*poolBackend
	base []byte
}

func (c *checkedPool) ReadAt(ctx context.Context, b []byte, off int64) error {
	c.check(b, c.base)
	return c.memBackend.ReadAt(ctx, b, off)
}

func (c *checkedPool) WriteAt(ctx context.Context, b []byte, off int64, fua bool) error {
	c.check(b, c.base)
	return c.memBackend.WriteAt(ctx, b, off, fua)
}

// Detach with a backend call that does not return (a command stuck in its
// timeout and abort escalation): Detach returns at its deadline, the call
// is cancelled and abandoned, its late write into the buffer harms
// nothing, and the request, never completed, is reissued to the next
// server, whose answer dd gets.
func TestLabDetachAbandonsStuckCall(t *testing.T) {
	labSetup(t)
	b := newStuckBackend(3 << 16)
	rand.Read(b.data)
	d := createLab(t, b, DeviceOptions{QueueDepth: 16})
	id, dev := d.ID(), d.BlockPath()
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command("dd", "if="+dev, "of="+out, "bs=64k", "count=1", "skip=3", "iflag=direct", "status=none")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-b.started:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the read never reached the backend")
	}
	detached := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		detached <- d.DetachContext(ctx)
	}()
	select {
	case err := <-detached:
		if err != nil {
			t.Fatalf("DetachContext: %v", err)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("DetachContext still waiting for the stuck backend call 20 s after its 1 s deadline")
	}
	close(b.late) // the abandoned call returns now, writing into its buffer
	select {
	case err := <-waited:
		t.Fatalf("dd finished while the device had no server: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d2, got := recoverUnder(ctx, t, id, b.memBackend, cmd, waited, out)
	if !bytes.Equal(got, b.snapshot(3<<16, 1<<16)) {
		t.Fatal("the reissued read returned other data")
	}
	if err := d2.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// recoverUnder serves device id again with b (Recover) while cmd, a dd
// that was blocked on the device with no server, waits; it returns the
// recovered device (closed at cleanup) and what dd read into out.
func recoverUnder(ctx context.Context, t *testing.T, id int, b Backend, cmd *exec.Cmd, waited <-chan error, out string) (*Device, []byte) {
	t.Helper()
	d, err := Recover(ctx, id, b, DeviceOptions{})
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("Recover: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("dd after recovery: %v", err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("dd still blocked after recovery")
	}
	got, _ := os.ReadFile(out)
	return d, got
}

// StopIfUnused: where the driver offers UBLK_F_SAFE_STOP_DEV, an open
// device is not stopped (ErrOpen) and stays served; once closed it is
// stopped and removed. Without the feature it stops at once.
func TestLabStopIfUnused(t *testing.T) {
	labSetup(t)
	m := newMemBackend(8<<20, 512)
	d := createLab(t, m, DeviceOptions{QueueDepth: 8})
	defer d.Close()
	f, err := os.Open(d.BlockPath())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if d.Features()&FlagSafeStopDev == 0 {
		f.Close()
		t.Logf("driver without UBLK_F_SAFE_STOP_DEV (features %#x): StopIfUnused is Stop", d.Features())
		if err := d.StopIfUnused(ctx); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := d.StopIfUnused(ctx); !errors.Is(err, ErrOpen) {
		t.Fatalf("StopIfUnused while open: %v, want ErrOpen", err)
	}
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatalf("read after the refused stop: %v", err)
	}
	select {
	case <-d.Done():
		t.Fatal("device ended after the refused stop")
	default:
	}
	f.Close()
	if err := d.StopIfUnused(ctx); err != nil {
		t.Fatalf("StopIfUnused once closed: %v", err)
	}
	if _, err := os.Stat(d.BlockPath()); !os.IsNotExist(err) {
		t.Fatalf("%s still exists: %v", d.BlockPath(), err)
	}
}
