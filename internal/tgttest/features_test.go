package tgttest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// These tests drive tgtd with real initiators: qemu-io through qemu's
// libiscsi block driver, and libiscsi's own tools.

func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (try: apt-get install %s)", name, pkg)
	}
	return p
}

func iscsiURL(s *Server, iqn string, lun int) string {
	return fmt.Sprintf("iscsi://%s/%s/%d", s.Portal(), iqn, lun)
}

// qemuIO runs qemu-io commands against url and returns the combined output.
func qemuIO(t *testing.T, url string, readOnly bool, cmds ...string) (string, error) {
	t.Helper()
	qemu := needTool(t, "qemu-io", "qemu-utils qemu-block-extra")
	args := []string{"-f", "raw"}
	if readOnly {
		args = append(args, "-r")
	}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, qemu, append(args, url)...).CombinedOutput()
	if err == nil && (strings.Contains(string(out), "Pattern verification failed") || strings.Contains(string(out), "failed:")) {
		err = fmt.Errorf("qemu-io reported a failure")
	}
	return string(out), err
}

func mustQemuIO(t *testing.T, url string, cmds ...string) {
	t.Helper()
	if out, err := qemuIO(t, url, false, cmds...); err != nil {
		t.Fatalf("qemu-io %q: %v\n%s", cmds, err, out)
	}
}

func syncCounts(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

// readCapacity16 returns iscsi-readcapacity16's output for LUN 1.
func readCapacity16(t *testing.T, s *Server) string {
	t.Helper()
	rc16 := needTool(t, "iscsi-readcapacity16", "libiscsi-bin")
	out, err := exec.Command(rc16, iscsiURL(s, s.IQN(), 1)).CombinedOutput()
	if err != nil {
		t.Fatalf("iscsi-readcapacity16: %v\n%s", err, out)
	}
	return string(out)
}

func TestDataReachesBackingFile(t *testing.T) {
	s := Start(t)
	mustQemuIO(t, iscsiURL(s, s.IQN(), 1), "write -P 0x5a 12288 4096")
	if got := readAt(t, s.LUNPath(s.IQN(), 1), 12288, 4096); !bytes.Equal(got, bytes.Repeat([]byte{0x5a}, 4096)) {
		t.Errorf("backing file at 12288: % x..., want 5a", got[:8])
	}
	syncCounts(t, s)
	if c := s.Commands(1, OpWrite10); c.Done != 1 {
		t.Errorf("WRITE(10) on LUN 1: %+v, want Done 1", c)
	}
	if c := s.Commands(1, OpSynchronizeCache10); c.Done < 1 {
		t.Errorf("SYNCHRONIZE CACHE(10) on LUN 1 (qemu flushes on close): %+v", c)
	}
}

func TestThinProvisioningPunchesHoles(t *testing.T) {
	s := Start(t, Target{LUNs: []LUN{{ThinProvisioning: true}}})
	if out := readCapacity16(t, s); !strings.Contains(out, "LBPME:1 LBPRZ:1") {
		t.Errorf("thin LUN: READ CAPACITY(16) lacks LBPME:1 LBPRZ:1:\n%s", out)
	}
	url, path := iscsiURL(s, s.IQN(), 1), s.LUNPath(s.IQN(), 1)
	mustQemuIO(t, url, "write -P 0xab 0 64k", "write -P 0xab 1M 1M", "write -P 0xab 4M 1M")
	exts, err := DataExtents(path)
	if err != nil {
		t.Fatal(err)
	}
	if !Overlaps(exts, 1<<20, 1<<20) || !Overlaps(exts, 4<<20, 1<<20) {
		t.Fatalf("written ranges not allocated: %+v", exts)
	}
	syncCounts(t, s)
	before := s.Commands(1, OpSynchronizeCache10).Done
	mustQemuIO(t, url, "discard 1M 1M", "write -z -u 4M 1M", "flush", "read -P 0 1M 1M", "read -P 0 4M 1M")
	syncCounts(t, s)
	if c := s.Commands(1, OpUnmap); c.Done != 1 {
		t.Errorf("UNMAP: %+v, want Done 1", c)
	}
	if c := s.Commands(1, OpWriteSame10); c.Done != 1 {
		t.Errorf("WRITE SAME(10): %+v, want Done 1", c)
	}
	if c := s.Commands(1, OpSynchronizeCache10); c.Done < before+1 {
		t.Errorf("SYNCHRONIZE CACHE(10): %+v, want more than %d done", c, before)
	}
	if exts, err = DataExtents(path); err != nil {
		t.Fatal(err)
	}
	if Overlaps(exts, 1<<20, 1<<20) || Overlaps(exts, 4<<20, 1<<20) || !Overlaps(exts, 0, 64<<10) {
		t.Errorf("after UNMAP and WRITE SAME+UNMAP: extents %+v, want holes at 1M and 4M, data at 0", exts)
	}
}

// Without thin_provisioning tgt advertises no logical block provisioning,
// so libiscsi-based initiators do not send UNMAP, and a WRITE SAME with
// UNMAP writes zeroes: the range stays allocated.
func TestFullyProvisionedKeepsBlocks(t *testing.T) {
	s := Start(t)
	if out := readCapacity16(t, s); !strings.Contains(out, "LBPME:0 LBPRZ:0") {
		t.Errorf("fully provisioned LUN: READ CAPACITY(16) lacks LBPME:0 LBPRZ:0:\n%s", out)
	}
	url, path := iscsiURL(s, s.IQN(), 1), s.LUNPath(s.IQN(), 1)
	mustQemuIO(t, url, "write -P 0xab 1M 1M", "write -z -u 1M 1M", "read -P 0 1M 1M")
	syncCounts(t, s)
	if c := s.Commands(1, OpWriteSame10); c.Done != 1 {
		t.Errorf("WRITE SAME(10): %+v, want Done 1", c)
	}
	exts, err := DataExtents(path)
	if err != nil {
		t.Fatal(err)
	}
	if !Overlaps(exts, 1<<20, 1<<20) {
		t.Errorf("range 1M+1M deallocated on a fully provisioned LUN: %+v", exts)
	}
}

// A LUN over 2 TiB needs 16-byte CDBs: qemu switches to READ/WRITE(16) and
// WRITE SAME(16), which is how this test reaches opcode 0x93.
func TestLargeSparseLUN(t *testing.T) {
	const size = 3 << 40
	s := Start(t, Target{LUNs: []LUN{{Size: size, ThinProvisioning: true}}})
	url, path := iscsiURL(s, s.IQN(), 1), s.LUNPath(s.IQN(), 1)
	const off = 2500 << 30
	mustQemuIO(t, url, fmt.Sprintf("write -P 0xee %d 64k", off), fmt.Sprintf("read -P 0xee %d 64k", off))
	if got := readAt(t, path, off, 16); !bytes.Equal(got, bytes.Repeat([]byte{0xee}, 16)) {
		t.Errorf("backing file at 2500 GiB: % x", got)
	}
	mustQemuIO(t, url, fmt.Sprintf("write -z -u %d 64k", off))
	syncCounts(t, s)
	if c := s.Commands(1, OpWrite16); c.Done != 1 {
		t.Errorf("WRITE(16): %+v, want Done 1", c)
	}
	if c := s.Commands(1, OpWriteSame16); c.Done != 1 {
		t.Errorf("WRITE SAME(16): %+v, want Done 1", c)
	}
	if exts, err := DataExtents(path); err != nil || Overlaps(exts, off, 64<<10) {
		t.Errorf("after WRITE SAME(16)+UNMAP: extents %+v (%v), want a hole at 2500 GiB", exts, err)
	}
	if n, err := AllocatedBytes(path); err != nil || n > 1<<20 {
		t.Errorf("3 TiB LUN occupies %d bytes (%v), want it sparse", n, err)
	}
}

func TestBlockSize4096(t *testing.T) {
	rc16 := needTool(t, "iscsi-readcapacity16", "libiscsi-bin")
	s := Start(t, Target{LUNs: []LUN{{Size: 16 << 20, BlockSize: 4096}}})
	out, err := exec.Command(rc16, iscsiURL(s, s.IQN(), 1)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "LOGICAL BLOCK LENGTH IN BYTES:4096") ||
		!strings.Contains(string(out), fmt.Sprintf("RETURNED LOGICAL BLOCK ADDRESS:%d", 16<<20/4096-1)) {
		t.Fatalf("READ CAPACITY(16): %v\n%s", err, out)
	}
	mustQemuIO(t, iscsiURL(s, s.IQN(), 1), "write -P 0xcd 8192 4096")
	if got := readAt(t, s.LUNPath(s.IQN(), 1), 8192, 4096); !bytes.Equal(got, bytes.Repeat([]byte{0xcd}, 4096)) {
		t.Errorf("backing file at LBA 2: % x...", got[:8])
	}
}

func TestReadOnlyLUN(t *testing.T) {
	s := Start(t, Target{LUNs: []LUN{{ReadOnly: true}}})
	url := iscsiURL(s, s.IQN(), 1)
	out, err := qemuIO(t, url, false, "write -P 0xab 0 4k")
	if err == nil || !strings.Contains(out, "write protected") {
		t.Errorf("read-write open of a readonly=1 LUN: %v\n%s", err, out)
	}
	if out, err := qemuIO(t, url, true, "read -P 0 0 4k"); err != nil {
		t.Errorf("read-only open: %v\n%s", err, out)
	}
	if got := readAt(t, s.LUNPath(s.IQN(), 1), 0, 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Error("readonly LUN was written")
	}
}

func TestCHAP(t *testing.T) {
	rc16 := needTool(t, "iscsi-readcapacity16", "libiscsi-bin")
	s := Start(t,
		Target{IQN: "iqn.2024-01.io.iser-attach.test:chap", CHAP: &CHAP{"alice", "alicesecret12"}},
		Target{IQN: "iqn.2024-01.io.iser-attach.test:mutual", CHAP: &CHAP{"bob", "bobsecret1234"}, Mutual: &CHAP{"tgt", "targetsecret1"}},
	)
	login := func(creds, iqn, query string) error {
		url := fmt.Sprintf("iscsi://%s%s/%s/1%s", creds, s.Portal(), iqn, query)
		out, err := exec.Command(rc16, url).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	const one, mutual = "iqn.2024-01.io.iser-attach.test:chap", "iqn.2024-01.io.iser-attach.test:mutual"
	for _, tc := range []struct {
		name, creds, iqn, query string
		ok                      bool
	}{
		{"no credentials", "", one, "", false},
		{"wrong secret", "alice%wrongsecret1@", one, "", false},
		{"right secret", "alice%alicesecret12@", one, "", true},
		{"mutual asked, target has no outgoing account", "alice%alicesecret12@", one, "?target_user=tgt&target_password=targetsecret1", false},
		{"one-way on a mutual target", "bob%bobsecret1234@", mutual, "", true},
		{"mutual", "bob%bobsecret1234@", mutual, "?target_user=tgt&target_password=targetsecret1", true},
		{"mutual, target secret wrong", "bob%bobsecret1234@", mutual, "?target_user=tgt&target_password=wrongsecret1", false},
	} {
		err := login(tc.creds, tc.iqn, tc.query)
		if (err == nil) != tc.ok {
			t.Errorf("%s: login error %v, want success %v", tc.name, err, tc.ok)
		}
	}
}

func TestSessionsAndCloseWithActiveSession(t *testing.T) {
	qemu := needTool(t, "qemu-io", "qemu-utils qemu-block-extra")
	s := Start(t)
	cmd := exec.Command(qemu, "-f", "raw", iscsiURL(s, s.IQN(), 1))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sess []Session
	for ctx.Err() == nil {
		if sess, err = s.Sessions(ctx, s.IQN()); err != nil {
			t.Fatal(err)
		}
		if len(sess) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(sess) != 1 || !strings.HasPrefix(sess[0].Initiator, "iqn.") || len(sess[0].Connections) != 1 || sess[0].Connections[0] != "127.0.0.1" {
		t.Fatalf("sessions: %+v", sess)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close with a live session took %v: the graceful path failed", d)
	}
}
