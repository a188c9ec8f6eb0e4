package nbd

// Tests against real NBD clients: libnbd's nbdinfo and nbdcopy, qemu-img,
// qemu-io and fio's nbd engine. The tools are installed in CI; a missing
// one fails the test with the package to install.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// tool returns the path of an external program or fails the test with the
// Debian package that provides it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): apt-get install %s", name, err, pkg)
	}
	return p
}

// runTool runs a command with a timeout and returns its combined output.
func runTool(t *testing.T, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = t.TempDir() // tools such as fio drop state files in their cwd
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: timed out after %v\n%s", name, strings.Join(args, " "), timeout, out)
	}
	return string(out), err
}

func mustRun(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runTool(t, timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func checkNoViolations(t *testing.T, m *nbdtest.Memory) {
	t.Helper()
	if st := m.Stats(); st.Violations != 0 {
		t.Errorf("backend saw %d calls a correct server must not make; last: %s", st.Violations, st.LastViolation)
	}
}

type nbdinfoExport struct {
	Name        string `json:"export-name"`
	Description string `json:"description"`
	Size        int64  `json:"export-size"`
	ReadOnly    bool   `json:"is_read_only"`
	CanFlush    bool   `json:"can_flush"`
	CanFUA      bool   `json:"can_fua"`
	CanTrim     bool   `json:"can_trim"`
	CanZero     bool   `json:"can_zero"`
	CanMulti    bool   `json:"can_multi_conn"`
	CanCache    bool   `json:"can_cache"`
	BlockMin    uint32 `json:"block_size_minimum"`
	BlockPref   uint32 `json:"block_size_preferred"`
	BlockMax    uint32 `json:"block_size_maximum"`
}

type nbdinfoJSON struct {
	Protocol string          `json:"protocol"`
	Exports  []nbdinfoExport `json:"exports"`
}

func nbdinfo(t *testing.T, args ...string) nbdinfoJSON {
	t.Helper()
	out := mustRun(t, 30*time.Second, tool(t, "nbdinfo", "libnbd-bin"), append([]string{"--json"}, args...)...)
	var j nbdinfoJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("nbdinfo output: %v\n%s", err, out)
	}
	return j
}

func TestNbdinfo(t *testing.T) {
	rw, rwMem := memExport("disk", nbdtest.Config{Size: 8 << 20, BlockSize: 4096, PreferredBlockSize: 65536})
	ro, roMem := memExport("cdrom", nbdtest.Config{Size: 2 << 20, BlockSize: 2048, ReadOnly: true})
	ts := startServer(t, []Export{rw, ro}, Options{})

	want := []nbdinfoExport{{
		Name: "disk", Description: "test export disk", Size: 8 << 20,
		CanFlush: true, CanFUA: true, CanTrim: true, CanZero: true, CanMulti: true,
		BlockMin: 4096, BlockPref: 65536, BlockMax: 32 << 20,
	}, {
		Name: "cdrom", Description: "test export cdrom", Size: 2 << 20, ReadOnly: true,
		CanFlush: true, CanFUA: true, CanMulti: true,
		BlockMin: 2048, BlockPref: 4096, BlockMax: 32 << 20,
	}}
	for _, w := range want {
		j := nbdinfo(t, ts.uri(w.Name))
		if j.Protocol != "newstyle-fixed" || len(j.Exports) != 1 {
			t.Fatalf("nbdinfo %s: %+v", w.Name, j)
		}
		if j.Exports[0] != w {
			t.Errorf("nbdinfo %s:\n got %+v\nwant %+v", w.Name, j.Exports[0], w)
		}
	}
	list := nbdinfo(t, "--list", ts.uri(""))
	if len(list.Exports) != 2 || list.Exports[0] != want[0] || list.Exports[1] != want[1] {
		t.Errorf("nbdinfo --list: %+v", list.Exports)
	}
	// Over TCP too.
	l, err := Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.Serve(context.Background(), l)
	out := mustRun(t, 30*time.Second, "nbdinfo", "--size", fmt.Sprintf("nbd://%s/disk", l.Addr()))
	if strings.TrimSpace(out) != "8388608" {
		t.Errorf("nbdinfo --size over TCP: %q", out)
	}
	checkNoViolations(t, rwMem)
	checkNoViolations(t, roMem)
}

func randomFile(t *testing.T, path string, size int) []byte {
	t.Helper()
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestNbdcopy copies random data into an export and back out with nbdcopy
// (4 connections thanks to CAN_MULTI_CONN, up to 64 requests each), and
// compares checksums. The source file has a hole, which nbdcopy turns into
// write-zeroes requests.
func TestNbdcopy(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		nbdcopy := tool(t, "nbdcopy", "libnbd-bin")
		const size = 24 << 20
		e, mem := memExport("copy", nbdtest.Config{Size: size, BlockSize: 512, MaxTransfer: 256 << 10})
		ts := startServer(t, []Export{e}, Options{})
		dir := t.TempDir()
		src := filepath.Join(dir, "src.img")
		data := randomFile(t, src, size)
		// Punch a 4 MiB hole in the middle.
		f, err := os.OpenFile(src, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fallocate(int(f.Fd()), 0x02|0x01 /* PUNCH_HOLE|KEEP_SIZE */, 8<<20, 4<<20); err != nil {
			t.Logf("cannot punch hole (%v): copying without one", err)
		} else {
			clear(data[8<<20 : 12<<20])
		}
		f.Close()
		mem.Poke(8<<20, bytes.Repeat([]byte{0xee}, 4<<20)) // the zeroing must be real

		mustRun(t, 60*time.Second, nbdcopy, src, ts.uri("copy"))
		if sha256.Sum256(mem.Bytes()) != sha256.Sum256(data) {
			t.Fatal("export content differs from the source after nbdcopy in")
		}
		dst := filepath.Join(dir, "dst.img")
		mustRun(t, 60*time.Second, nbdcopy, ts.uri("copy"), dst)
		out, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(out) != sha256.Sum256(data) {
			t.Fatal("copy-out differs from the source")
		}
		st := mem.Stats()
		t.Logf("backend: %d reads, %d writes, %d write-zeroes, %d trims, %d flushes, max %d in flight",
			st.Reads, st.Writes, st.WriteZeroes, st.Trims, st.Flushes, st.MaxInFlight)
		if st.MaxWriteLen > 256<<10 || st.MaxReadLen > 256<<10 {
			t.Errorf("requests not split to MaxTransfer: max write %d, read %d", st.MaxWriteLen, st.MaxReadLen)
		}
		inFlight := st.MaxInFlight
		if rm, ok := e.Backend.(*nbdtest.ReapingMemory); ok {
			// Its calls are short, and the writer polling raw holds one
			// of the two Ps: count requests, not running calls.
			inFlight = rm.ReapStats().MaxPending
		}
		if inFlight < 2 {
			t.Errorf("nbdcopy never had two requests in flight (max %d)", inFlight)
		}
		checkNoViolations(t, mem)
	})
}

// TestQemuImgCompare: qemu's NBD client reads the export and compares it to
// the file it came from, then finds a one-byte difference.
func TestQemuImgCompare(t *testing.T) {
	qemuImg := tool(t, "qemu-img", "qemu-utils")
	const size = 8 << 20
	e, mem := memExport("cmp", nbdtest.Config{Size: size, BlockSize: 4096})
	ts := startServer(t, []Export{e}, Options{})
	src := filepath.Join(t.TempDir(), "src.img")
	mem.Poke(0, randomFile(t, src, size))

	out := mustRun(t, 60*time.Second, qemuImg, "compare", "-f", "raw", "-F", "raw", src, ts.uri("cmp"))
	if !strings.Contains(out, "Images are identical") {
		t.Fatalf("qemu-img compare: %s", out)
	}
	b := mem.Bytes()[5<<20+123 : 5<<20+124]
	mem.Poke(5<<20+123, []byte{^b[0]})
	out, err := runTool(t, 60*time.Second, qemuImg, "compare", "-f", "raw", "-F", "raw", src, ts.uri("cmp"))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, "Content mismatch at offset 5242880") {
		t.Fatalf("qemu-img compare after a change: %v\n%s", err, out)
	}
	checkNoViolations(t, mem)
}

// TestQemuIO drives every write-side command from qemu and checks each
// reaches the backend with the right flags.
func TestQemuIO(t *testing.T) {
	qemuIO := tool(t, "qemu-io", "qemu-utils")
	e, mem := memExport("io", nbdtest.Config{Size: 4 << 20, BlockSize: 512})
	ts := startServer(t, []Export{e}, Options{})
	mem.Poke(0, bytes.Repeat([]byte{0xff}, 4<<20))

	// Writeback cache: qemu sets FUA only where asked (writethrough, the
	// default, would set it on every write).
	out := mustRun(t, 60*time.Second, qemuIO, "-f", "raw", "-d", "unmap", "-t", "writeback",
		"-c", "write -P 0x55 0 64k",
		"-c", "write -f -P 0x66 64k 4k", // FUA
		"-c", "write -z 128k 64k", // NO_HOLE set: mayUnmap=false
		"-c", "write -z -u 192k 64k", // mayUnmap=true
		"-c", "discard 256k 64k", // TRIM
		"-c", "flush",
		"-c", "read -P 0x55 0 64k",
		"-c", "read -P 0x66 64k 4k",
		"-c", "read -P 0 128k 192k",
		"-c", "read -P 0xff 320k 4k",
		ts.uri("io"))
	if strings.Contains(out, "fail") || strings.Contains(out, "Pattern verification") {
		t.Fatalf("qemu-io:\n%s", out)
	}
	st := mem.Stats()
	t.Logf("backend stats %+v", st)
	if st.Writes != 2 || st.FUAWrites != 1 || st.WriteZeroes != 2 || st.WriteZeroesNoUnmap != 1 ||
		st.FUAWriteZeroes != 0 || st.Trims != 1 || st.Flushes < 1 {
		t.Errorf("commands did not reach the backend as expected: %+v", st)
	}
	checkNoViolations(t, mem)
}

// TestClientSeesErrors: backend failures reach real clients as I/O errors
// with the right errno, and the export stays usable.
func TestClientSeesErrors(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		qemuIO := tool(t, "qemu-io", "qemu-utils")
		nbdcopy := tool(t, "nbdcopy", "libnbd-bin")
		e, mem := memExport("bad", nbdtest.Config{Size: 4 << 20, BlockSize: 512})
		ts := startServer(t, []Export{e}, Options{})
		mem.SetHook(func(_ context.Context, op nbdtest.Op, off, length int64) error {
			switch {
			case op == nbdtest.OpRead && off < 2<<20+4096 && off+length > 2<<20:
				return syscall.EIO // a bad sector at 2 MiB
			case op == nbdtest.OpWrite && off >= 3<<20:
				return syscall.ENOSPC // thin pool out of space
			case op == nbdtest.OpFlush:
				return fmt.Errorf("synchronize cache: %w", syscall.EIO)
			}
			return nil
		})
		out, _ := runTool(t, 60*time.Second, qemuIO, "-f", "raw",
			"-c", "read 2M 4k", "-c", "write 3M 4k", "-c", "read 0 4k", "-c", "write 1M 4k", ts.uri("bad"))
		for _, want := range []string{
			"read failed: Input/output error",
			"write failed: No space left on device",
			"read 4096/4096 bytes at offset 0",
			"wrote 4096/4096 bytes at offset 1048576",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("qemu-io output lacks %q:\n%s", want, out)
			}
		}
		dst := filepath.Join(t.TempDir(), "out.img")
		out, err := runTool(t, 60*time.Second, nbdcopy, ts.uri("bad"), dst)
		if err == nil || !strings.Contains(out, "Input/output error") {
			t.Errorf("nbdcopy over a bad sector: err %v, output:\n%s", err, out)
		}
		checkNoViolations(t, mem)
	})
}

// TestFioVerify runs fio's nbd engine at iodepth 32 with crc32c
// verification, against a backend slow enough that requests overlap, and
// checks they really were in flight together.
func TestFioVerify(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		fio := tool(t, "fio", "fio")
		const size = 16 << 20
		e, mem := memExport("fio", nbdtest.Config{Size: size, BlockSize: 512})
		ts := startServer(t, []Export{e}, Options{})
		mem.SetHook(func(ctx context.Context, _ nbdtest.Op, _, _ int64) error {
			time.Sleep(500 * time.Microsecond)
			return nil
		})
		out := mustRun(t, 120*time.Second, fio, "--name=verify", "--ioengine=nbd",
			"--uri="+ts.uri("fio"), "--rw=randwrite", "--bsrange=4k-128k", "--iodepth=32",
			"--size=16m", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0",
			"--output-format=json")
		var res struct {
			Jobs []struct {
				Error int `json:"error"`
				Read  struct {
					Bytes int64 `json:"io_bytes"`
				} `json:"read"`
				Write struct {
					Bytes int64 `json:"io_bytes"`
				} `json:"write"`
			} `json:"jobs"`
		}
		if i := strings.IndexByte(out, '{'); i > 0 {
			out = out[i:] // fio prints notes before the JSON
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Jobs) != 1 {
			t.Fatalf("fio output (%v):\n%s", err, out)
		}
		j := res.Jobs[0]
		if j.Error != 0 || j.Write.Bytes < size || j.Read.Bytes < size {
			t.Fatalf("fio: error %d, wrote %d, verified %d bytes", j.Error, j.Write.Bytes, j.Read.Bytes)
		}
		st := mem.Stats()
		t.Logf("backend: max %d in flight, %d writes, %d reads", st.MaxInFlight, st.Writes, st.Reads)
		if st.MaxInFlight < 16 {
			t.Errorf("fio at iodepth 32: only %d requests in flight at once", st.MaxInFlight)
		}
		checkNoViolations(t, mem)
	})
}
