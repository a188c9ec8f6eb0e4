package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// lockedBuffer is a bytes.Buffer that a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// logMessages returns the "message" of every JSON log line with that
// message, in order.
func logMessages(log, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// serveJSON starts `iser-attach --log-format=json serve` with extra
// flags and returns the NBD URI and the log it writes to stderr.
func serveJSON(t *testing.T, srv *tgttest.Server, extra ...string) (string, *lockedBuffer) {
	t.Helper()
	return startServe(t, srv, []string{"--log-format=json"}, "1", extra...)
}

// TestServeSurvivesTargetFaultsUnderFio runs fio's verifying random writer
// through `iser-attach serve` while tgtd first drops the connection and
// then crashes and comes back a second later. With a replacement timeout
// of 30 s the NBD client must see neither an error nor a wrong byte: fio
// checks a CRC32C in every block it wrote once the writes are done.
func TestServeSurvivesTargetFaultsUnderFio(t *testing.T) {
	need(t, "fio")
	if out, err := exec.Command("fio", "--enghelp").CombinedOutput(); err != nil || !strings.Contains(string(out), "\tnbd\n") {
		t.Fatalf("this fio has no nbd engine (need fio >= 3.20 built with libnbd): %v\n%s", err, out)
	}
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 64 << 20}}})
	uri, logs := serveJSON(t, srv, "--replacement-timeout", "30s", "--nop-interval", "1s", "--nop-timeout", "1s")

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// About 8 s of writes at 4 MiB/s; every byte is written once (fio's
	// random map) and read back and checked after the writes.
	fio := exec.CommandContext(ctx, "fio", "--name=recovery", "--ioengine=nbd", "--uri="+uri,
		"--rw=randwrite", "--bsrange=4k-64k", "--iodepth=16", "--size=32M", "--rate=4m",
		"--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
		"--verify_state_save=0", "--directory="+dir)
	var out lockedBuffer
	fio.Stdout, fio.Stderr = &out, &out
	start := time.Now()
	if err := fio.Start(); err != nil {
		t.Fatal(err)
	}
	fioDone := make(chan error, 1)
	go func() { fioDone <- fio.Wait() }()
	faults := func() error {
		time.Sleep(2 * time.Second)
		n, err := srv.DropConnections(ctx, srv.IQN())
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("DropConnections closed %d connections, want serve's 1", n)
		}
		t.Logf("%v: dropped %d connection(s)", time.Since(start).Round(time.Millisecond), n)
		time.Sleep(2 * time.Second)
		t.Logf("%v: killing tgtd for 1 s", time.Since(start).Round(time.Millisecond))
		return srv.Restart(ctx, time.Second)
	}
	if err := faults(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: tgtd back", time.Since(start).Round(time.Millisecond))
	select {
	case err := <-fioDone:
		if err != nil {
			t.Fatalf("fio: %v\n%s", err, out.String())
		}
		t.Fatalf("fio finished %v after it started, before the faults were over: the test proves nothing\n%s",
			time.Since(start), out.String())
	default:
	}
	if err := <-fioDone; err != nil {
		t.Fatalf("fio: %v\n%s", err, out.String())
	}
	took := time.Since(start)
	report := out.String()
	if !strings.Contains(report, "err= 0") {
		t.Errorf("fio's summary lacks err= 0:\n%s", report)
	}
	for _, bad := range []string{"verify failed", "bad magic", "bad header", "io_u error"} {
		if strings.Contains(report, bad) {
			t.Errorf("fio output mentions %q:\n%s", bad, report)
		}
	}
	reinstated := logMessages(logs.String(), "session reinstated")
	if len(reinstated) < 2 {
		t.Fatalf("serve logged %d \"session reinstated\", want 2 (one per fault)", len(reinstated))
	}
	if n := len(logMessages(logs.String(), "replacement timeout: failing I/O with EIO while recovery goes on")); n != 0 {
		t.Errorf("serve hit the replacement timeout %d times", n)
	}
	for _, line := range strings.Split(report, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "read:") || strings.HasPrefix(l, "write:") || strings.HasPrefix(l, "issued rwts:") {
			t.Logf("fio: %s", l)
		}
	}
	t.Logf("fio ran %v through 2 target faults; serve logged %d reinstatements (down %v and %v)",
		took.Round(time.Millisecond), len(reinstated), reinstated[0]["down"], reinstated[1]["down"])
}
