package nbdkernel

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
	"github.com/rs/zerolog"
)

// Tests against the real nbd driver, in the VM lab
// (scripts/vmlab/tests/71-nbd-kernel.sh, Linux 6.12, as root). They run only
// when ISER_LAB_NBD=1; then a kernel without the nbd module fails them.
// They use dd, blkdiscard, mkfs.ext4, e2fsck, mount and fio.

const labSize = 128 << 20

func labEnv(t *testing.T) {
	t.Helper()
	if os.Getenv("ISER_LAB_NBD") != "1" {
		t.Skip("runs in the VM lab (ISER_LAB_NBD unset; as root: modprobe nbd, ISER_LAB_NBD=1)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Supported(ctx); err != nil {
		t.Fatalf("the lab kernel must have nbd: %v", err)
	}
}

// labServer serves an in-memory export that counts what reaches it.
func labServer(t *testing.T) (*nbd.Server, *nbdtest.Memory) {
	t.Helper()
	mem := nbdtest.NewMemory(nbdtest.Config{Size: labSize, BlockSize: 512, PreferredBlockSize: 4096})
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.WarnLevel).
		With().Timestamp().Logger()
	srv, err := nbd.NewServer([]nbd.Export{{Name: "lab", Backend: mem}}, nbd.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, mem
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

func sysfs(t *testing.T, d *Device, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.Path()), file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// delta runs f and returns how the backend's counters moved.
func delta(mem *nbdtest.Memory, f func()) nbdtest.Stats {
	a := mem.Stats()
	f()
	b := mem.Stats()
	return nbdtest.Stats{
		Reads: b.Reads - a.Reads, Writes: b.Writes - a.Writes, FUAWrites: b.FUAWrites - a.FUAWrites,
		Flushes: b.Flushes - a.Flushes, Trims: b.Trims - a.Trims, WriteZeroes: b.WriteZeroes - a.WriteZeroes,
		WriteZeroesNoUnmap: b.WriteZeroesNoUnmap - a.WriteZeroesNoUnmap,
		BytesRead:          b.BytesRead - a.BytesRead, BytesWritten: b.BytesWritten - a.BytesWritten,
	}
}

func randomFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(t.TempDir(), "random.bin")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func TestLabKernelDevice(t *testing.T) {
	labEnv(t)
	srv, mem := labServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := Attach(ctx, srv, "lab", Options{Index: AnyIndex, Connections: 4, BackendID: "iser-attach-lab"})
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	defer d.Close()
	dev := d.Path()
	t.Logf("attached %s", dev)
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFBLK ||
		int(st.Rdev>>8&0xfff) != nbdMajor {
		t.Fatalf("%s: not an nbd block device (%v, mode %o, rdev %#x)", dev, err, st.Mode, st.Rdev)
	}

	t.Run("sysfs", func(t *testing.T) {
		checks := map[string]string{
			"size":                     strconv.Itoa(labSize / 512),
			"backend":                  "iser-attach-lab",
			"queue/logical_block_size": "512",
			"queue/write_cache":        "write back", // NBD_FLAG_SEND_FLUSH
			"queue/fua":                "1",          // NBD_FLAG_SEND_FUA
			"ro":                       "0",
		}
		for f, want := range checks {
			if got := sysfs(t, d, f); got != want {
				t.Errorf("%s: %q, want %q", f, got, want)
			}
		}
		if got := sysfs(t, d, "queue/discard_max_bytes"); got == "0" {
			t.Error("discard_max_bytes 0: NBD_FLAG_SEND_TRIM did not reach the driver")
		}
		if got := sysfs(t, d, "queue/write_zeroes_max_bytes"); got == "0" {
			t.Error("write_zeroes_max_bytes 0: NBD_FLAG_SEND_WRITE_ZEROES did not reach the driver")
		}
		mq, _ := filepath.Glob(filepath.Join("/sys/block", filepath.Base(dev), "mq", "*"))
		// One hardware queue per socket, capped by blk-mq at the CPU count.
		if want := min(4, runtime.NumCPU()); len(mq) != want {
			t.Errorf("%d hardware queues, want %d (4 sockets, %d CPUs)", len(mq), want, runtime.NumCPU())
		}
		all, err := Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range all {
			found = found || (s.Index == d.Index() && s.Connected)
		}
		if !found {
			t.Errorf("NBD_CMD_STATUS does not show nbd%d connected: %v", d.Index(), all)
		}
	})

	t.Run("busy-index", func(t *testing.T) {
		_, err := Attach(ctx, srv, "lab", Options{Index: d.Index(), Connections: 1})
		if !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("second attach to %s: %v, want EBUSY", dev, err)
		}
	})

	t.Run("dd-direct", func(t *testing.T) {
		in, data := randomFile(t, 16<<20)
		s := delta(mem, func() {
			run(t, "dd", "if="+in, "of="+dev, "bs=1M", "oflag=direct", "seek=8", "status=none")
		})
		if s.BytesWritten != 16<<20 {
			t.Errorf("dd wrote 16 MiB, the backend got %d bytes", s.BytesWritten)
		}
		if !bytes.Equal(mem.Bytes()[8<<20:24<<20], data) {
			t.Fatal("backend contents differ from what dd wrote")
		}
		out := filepath.Join(t.TempDir(), "back.bin")
		run(t, "dd", "if="+dev, "of="+out, "bs=1M", "iflag=direct", "skip=8", "count=16", "status=none")
		back, err := os.ReadFile(out)
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("read back through %s differs (%v)", dev, err)
		}
	})

	t.Run("fsync-is-flush", func(t *testing.T) {
		s := delta(mem, func() {
			f, err := os.OpenFile(dev, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 1<<20), 40<<20); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		})
		if s.Flushes < 1 || s.BytesWritten < 1<<20 {
			t.Fatalf("buffered write + fsync reached the backend as %+v, want the data and a Flush", s)
		}
		if !bytes.Equal(mem.Bytes()[40<<20:41<<20], bytes.Repeat([]byte{0xa5}, 1<<20)) {
			t.Fatal("fsynced data not in the backend")
		}
	})

	t.Run("dsync-is-fua", func(t *testing.T) {
		s := delta(mem, func() {
			run(t, "dd", "if=/dev/urandom", "of="+dev, "bs=4k", "count=8", "seek=12800", "oflag=direct,dsync", "status=none")
		})
		if s.FUAWrites < 8 {
			t.Fatalf("8 O_DIRECT|O_DSYNC writes reached the backend as %+v, want 8 FUA writes", s)
		}
	})

	t.Run("blkdiscard-is-trim", func(t *testing.T) {
		s := delta(mem, func() { run(t, "blkdiscard", "-o", "8MiB", "-l", "1MiB", dev) })
		if s.Trims < 1 {
			t.Fatalf("blkdiscard reached the backend as %+v, want Trim", s)
		}
		if !bytes.Equal(mem.Bytes()[8<<20:9<<20], make([]byte, 1<<20)) {
			t.Fatal("trimmed range not zero in the backend")
		}
		s = delta(mem, func() { run(t, "blkdiscard", "-z", "-o", "9MiB", "-l", "1MiB", dev) })
		if s.WriteZeroes < 1 || s.WriteZeroesNoUnmap < 1 {
			t.Fatalf("blkdiscard -z reached the backend as %+v, want WriteZeroes with NO_HOLE", s)
		}
		if !bytes.Equal(mem.Bytes()[9<<20:10<<20], make([]byte, 1<<20)) {
			t.Fatal("zeroed range not zero in the backend")
		}
	})

	t.Run("backend-error-is-eio", func(t *testing.T) {
		const bad = 64 << 20
		mem.SetHook(func(ctx context.Context, op nbdtest.Op, off, length int64) error {
			if op == nbdtest.OpRead && off < bad+4096 && off+length > bad {
				return errors.New("injected medium error")
			}
			return nil
		})
		defer mem.SetHook(nil)
		cmd := exec.Command("dd", "if="+dev, "of=/dev/null", "bs=4k", "count=1", "skip="+strconv.Itoa(bad/4096), "iflag=direct")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Input/output error") {
			t.Fatalf("read of a failing block: %v\n%s", err, out)
		}
		mem.SetHook(nil)
		run(t, "dd", "if="+dev, "of=/dev/null", "bs=4k", "count=1", "skip="+strconv.Itoa(bad/4096), "iflag=direct", "status=none")
	})

	t.Run("ext4", func(t *testing.T) {
		mnt := t.TempDir()
		run(t, "mkfs.ext4", "-F", "-q", dev)
		in, data := randomFile(t, 8<<20)
		sum := sha256.Sum256(data)
		s := delta(mem, func() {
			run(t, "mount", "-t", "ext4", dev, mnt)
			run(t, "cp", in, filepath.Join(mnt, "data.bin"))
			run(t, "sync")
			run(t, "umount", mnt)
		})
		if s.Flushes < 1 || s.BytesWritten < 8<<20 {
			t.Fatalf("mount, write, sync, umount reached the backend as %+v", s)
		}
		run(t, "e2fsck", "-f", "-n", dev)
		run(t, "mount", "-t", "ext4", "-o", "ro", dev, mnt)
		back, err := os.ReadFile(filepath.Join(mnt, "data.bin"))
		run(t, "umount", mnt)
		if err != nil || sha256.Sum256(back) != sum {
			t.Fatalf("file read back from ext4 differs (%v)", err)
		}
	})

	t.Run("fio-verify", func(t *testing.T) {
		before := mem.Stats().MaxInFlight
		out := run(t, "fio", "--name=verify", "--filename="+dev, "--rw=randwrite", "--bs=4k-64k",
			"--iodepth=32", "--ioengine=libaio", "--direct=1", "--size=32M", "--offset=64M",
			"--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--randrepeat=0")
		if !strings.Contains(out, "verify") {
			t.Logf("fio output:\n%s", out)
		}
		if m := mem.Stats().MaxInFlight; m < 2 {
			t.Errorf("backend saw at most %d calls at once (before %d): no parallelism over 4 sockets at QD32", m, before)
		}
	})

	t.Run("detach", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := delta(mem, func() {
			if err := d.Detach(ctx); err != nil {
				t.Fatalf("detach: %v", err)
			}
		})
		if s.Flushes < 1 {
			t.Errorf("detach reached the backend as %+v, want a Flush", s)
		}
		select {
		case <-d.Done():
		default:
			t.Fatal("connections still running after Detach")
		}
		if got := sysfs(t, d, "size"); got != "0" {
			t.Errorf("size after detach: %s sectors, want 0", got)
		}
		all, err := Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.Index == d.Index() && s.Connected {
				t.Errorf("nbd%d still connected after detach", s.Index)
			}
		}
		if err := d.Err(); err != nil {
			t.Errorf("connection errors: %v", err)
		}
		// The index is free again.
		d2, err := Attach(ctx, srv, "lab", Options{Index: d.Index(), Connections: 1, ReadOnly: true})
		if err != nil {
			t.Fatalf("re-attach %s: %v", dev, err)
		}
		if got := sysfs(t, d2, "ro"); got != "1" {
			t.Errorf("read-only re-attach: ro=%s", got)
		}
		if err := d2.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		fmt.Fprintf(os.Stderr, "nbd lab: backend totals %+v\n", mem.Stats())
	})
}
