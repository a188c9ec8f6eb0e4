package main

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
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// These tests build the real binary and run it against a real tgtd, with
// real NBD clients (libnbd's nbdinfo and nbdcopy, qemu-img, qemu-io, fio).

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "iser-attach-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "iser-attach")
	// -tags clitest: frontend_clitest.go, a frontend for attach on any host.
	build := exec.Command("go", "build", "-tags", "clitest", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const initiatorIQN = "iqn.2026-11.io.iser-attach:cli-test"

// run runs the CLI and returns stdout, stderr and the error.
func run(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"--initiator-name", initiatorIQN}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: apt-get install libnbd-bin qemu-utils fio", tool)
		}
	}
}

func TestCLIDiscover(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:one"}, tgttest.Target{IQN: "iqn.2026-11.test:two"})
	out, errs, err := run(t, nil, "discover", srv.Portal())
	if err != nil {
		t.Fatalf("discover: %v\n%s", err, errs)
	}
	for _, iqn := range []string{"iqn.2026-11.test:one", "iqn.2026-11.test:two"} {
		if !strings.Contains(out, iqn) {
			t.Fatalf("table lacks %s:\n%s", iqn, out)
		}
	}
	out, errs, err = run(t, nil, "discover", "--json", srv.Portal())
	if err != nil {
		t.Fatalf("discover --json: %v\n%s", err, errs)
	}
	var got []struct {
		Target  string `json:"target"`
		Portals []struct {
			Address  string `json:"address"`
			GroupTag *int   `json:"group_tag"`
		} `json:"portals"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(got) != 2 || got[0].Target != "iqn.2026-11.test:one" || len(got[0].Portals) == 0 {
		t.Fatalf("discovered %+v", got)
	}
}

func TestCLIInfo(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 64 << 20}, {Size: 32 << 20, BlockSize: 4096, ThinProvisioning: true}}})
	out, errs, err := run(t, nil, "info", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "2", "--transport", "tcp", "--json")
	if err != nil {
		t.Fatalf("info: %v\n%s", err, errs)
	}
	var info struct {
		Size            int64  `json:"size"`
		BlockSize       int    `json:"block_size"`
		Vendor          string `json:"vendor"`
		WWN             string `json:"wwn"`
		Transport       string `json:"transport"`
		ThinProvisioned bool   `json:"thin_provisioned"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if info.Size != 32<<20 || info.BlockSize != 4096 || info.Vendor != "IET" || !strings.HasPrefix(info.WWN, "naa.") ||
		info.Transport != "tcp" || !info.ThinProvisioned {
		t.Fatalf("info %+v", info)
	}
	out, _, err = run(t, nil, "info", "--portal", srv.Portal(), "--target", srv.IQN(), "--lun", "1")
	if err != nil || !strings.Contains(out, "64.0 MiB") || !strings.Contains(out, "write cache") {
		t.Fatalf("info table: %v\n%s", err, out)
	}
}

// TestCLIErrors checks that every failure ends with a non-zero exit and a
// one-line reason, and that secrets never show.
func TestCLIErrors(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:chap", CHAP: &tgttest.CHAP{User: "u1", Secret: "goodsecret123"}},
		tgttest.Target{IQN: "iqn.2026-11.test:open"})
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unreachable portal", nil, []string{"info", "--portal", "127.0.0.1:1", "--target", "iqn.x:y"}, "connection refused"},
		{"unknown target", nil, []string{"info", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:nope"}, "target not found"},
		{"LUN not found", nil, []string{"info", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:open", "--lun", "7"}, "LUN not found"},
		{"wrong secret", []string{"ISER_ATTACH_CHAP_SECRET=wrongsecret99"},
			[]string{"info", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:chap", "--chap-user", "u1"}, "authentication failed"},
		{"no secret", nil, []string{"info", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:chap", "--chap-user", "u1"}, "needs a secret"},
		{"bad portal", nil, []string{"discover", "[::1"}, "portal"},
		{"bad transport", nil, []string{"info", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:open", "--transport", "carrier-pigeon"}, `--transport "carrier-pigeon": want auto, iser or tcp`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs, err := run(t, c.env, c.args...)
			if err == nil {
				t.Fatal("exit status 0")
			}
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "iser-attach: ") || !strings.Contains(last, c.want) {
				t.Fatalf("last line %q, want it to mention %q; stderr:\n%s", last, c.want, errs)
			}
			if strings.Contains(errs, "wrongsecret99") || strings.Contains(errs, "goodsecret123") {
				t.Fatal("a secret was printed")
			}
		})
	}
	// The right secret from a file works.
	f := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(f, []byte("goodsecret123\n"), 0o600)
	if _, errs, err := run(t, nil, "info", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:chap",
		"--lun", "1", "--chap-user", "u1", "--chap-secret-file", f); err != nil {
		t.Fatalf("CHAP from a file: %v\n%s", err, errs)
	}
}

// serve starts `iser-attach serve` and returns the NBD URI.
func serve(t *testing.T, srv *tgttest.Server, lun string) string {
	t.Helper()
	uri, _ := startServe(t, srv, nil, lun)
	return uri
}

// startServe starts `iser-attach [global...] serve` for LUN lun of srv over
// TCP with extra serve flags (no --lun when lun is empty); it returns the
// NBD URI once the socket exists and the process's stderr. Cleanup stops it
// with SIGINT and fails the test unless it exits 0.
func startServe(t *testing.T, srv *tgttest.Server, global []string, lun string, extra ...string) (string, *lockedBuffer) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	args := append(append([]string{"--initiator-name", initiatorIQN}, global...), "serve", "--portal", srv.Portal(),
		"--target", srv.IQN())
	if lun != "" {
		args = append(args, "--lun", lun)
	}
	args = append(args, "--transport", "tcp", "--listen", "unix:"+sock)
	cmd, logs, exited := startBinary(t, append(args, extra...)...)
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve exited with %v:\n%s", err, logs.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve did not exit on SIGINT:\n%s", logs.String())
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	})
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			return "nbd+unix:///?socket=" + sock, logs
		}
		select {
		case err := <-exited:
			t.Fatalf("serve exited: %v\n%s", err, logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("no socket after 10 s:\n%s", logs.String())
	return "", nil
}

// startBinary starts the binary with args, its stderr in the returned
// buffer; the channel receives the result of cmd.Wait once it exits.
func startBinary(t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd, logs, exited
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestServeWithNBDClients(t *testing.T) {
	need(t, "nbdinfo", "nbdcopy", "qemu-img", "qemu-io", "fio")
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 64 << 20, BlockSize: 4096, ThinProvisioning: true}}})
	uri := serve(t, srv, "1")

	var info struct {
		Exports []map[string]any `json:"exports"`
	}
	if err := json.Unmarshal([]byte(sh(t, "nbdinfo", "--json", uri)), &info); err != nil || len(info.Exports) != 1 {
		t.Fatalf("nbdinfo: %v %+v", err, info)
	}
	e := info.Exports[0]
	for k, want := range map[string]any{"export-size": 67108864.0, "block_size_minimum": 4096.0, "can_flush": true,
		"can_fua": true, "can_trim": true, "can_zero": true, "can_multi_conn": true, "is_read_only": false} {
		if e[k] != want {
			t.Errorf("nbdinfo %s = %v, want %v", k, e[k], want)
		}
	}

	dir := t.TempDir()
	in, back := filepath.Join(dir, "in"), filepath.Join(dir, "back")
	data := make([]byte, 24<<20)
	rand.Read(data)
	os.WriteFile(in, data, 0o600)
	sh(t, "nbdcopy", in, uri)
	sh(t, "nbdcopy", uri, back)
	got, _ := os.ReadFile(back)
	if sha256.Sum256(got[:len(data)]) != sha256.Sum256(data) {
		t.Fatal("nbdcopy round trip differs")
	}
	// qemu-img compares the export with a local image holding the same data.
	img := filepath.Join(dir, "img")
	os.WriteFile(img, append(data, make([]byte, 64<<20-len(data))...), 0o600)
	sh(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", img, uri)
	// The backing file holds it too: what the initiator acknowledged reached tgtd.
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	onDisk, _ := os.ReadFile(srv.LUNPath(srv.IQN(), 1))
	if !bytes.Equal(onDisk[:len(data)], data) {
		t.Fatal("tgtd's backing file differs from what was written")
	}

	sh(t, "fio", "--name=verify", "--ioengine=nbd", "--uri="+uri, "--rw=randwrite", "--bs=4k-64k", "--bsrange=4k-64k",
		"--iodepth=32", "--size=16M", "--verify=crc32c", "--verify_state_save=0", "--directory="+dir)

	// FLUSH, TRIM and WRITE_ZEROES through qemu-io reach tgtd as SYNCHRONIZE
	// CACHE, UNMAP and WRITE SAME(16), and read back as zeros.
	sh(t, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 32M 4M", "-c", "flush",
		"-c", "discard 32M 1M", "-c", "write -z 33M 1M", "-c", "write -z -u 34M 1M",
		"-c", "read -P 0 32M 3M", "-c", "read -P 0x5a 35M 1M", uri)
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		op   byte
	}{{"SYNCHRONIZE CACHE", tgttest.OpSynchronizeCache10}, {"UNMAP", tgttest.OpUnmap}, {"WRITE SAME(16)", tgttest.OpWriteSame16}} {
		if n := srv.Commands(1, c.op); n.Done == 0 {
			t.Errorf("%s did not reach tgtd: %+v", c.name, n)
		}
	}
}
