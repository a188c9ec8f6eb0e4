package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

var csiBlockCaps = []*csipb.VolumeCapability{{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
	AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}

// csiSanityVersion is the csi-sanity the test runs, built from the Go
// module proxy (or $ISER_CSI_SANITY, a csi-sanity binary, when set).
const csiSanityVersion = "v5.4.0"

func csiSanity(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ISER_CSI_SANITY"); p != "" {
		return p
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@"+csiSanityVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build csi-sanity %s: %v\n%s", csiSanityVersion, err, out)
	}
	return filepath.Join(dir, "csi-sanity")
}

// csiSanitySkip skips the Node specs that stage a volume: this host has
// neither ublk nor kernel NBD, so NodeStageVolume cannot attach. They are
// "should work", "should be idempotent", NodeUnpublishVolume's "should
// remove target path", NodeGetVolumeStats' "does not exist on the
// specified path" and NodeExpandVolume's "should work ... after
// node-publish"; the VM lab's 85-csi-node runs them. Every argument check
// of the Node service runs here.
const csiSanitySkip = `Node Service (should work|should be idempotent|NodeUnpublishVolume should remove target path|` +
	`NodeGetVolumeStats should fail when volume does not exist on the specified path|NodeExpandVolume should work)`

// csiPool starts tgtd with three LUNs of 64, 128 and 256 MiB and writes a
// pool file for it.
func csiPool(t *testing.T) (*tgttest.Server, string) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:csi-pool", LUNs: []tgttest.LUN{
		{Size: 128 << 20}, {Size: 64 << 20}, {Size: 256 << 20}}})
	pool := filepath.Join(t.TempDir(), "pool.conf")
	conf := "# the CSI pool\nportal = " + srv.Portal() + "\ntarget = " + srv.IQN() + "\ntransport = tcp\n"
	if err := os.WriteFile(pool, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, pool
}

// startCSI runs iser-attach csi and waits until its socket answers Probe.
func startCSI(t *testing.T, sock, pool, state string, extra ...string) (*exec.Cmd, *lockedBuffer, <-chan error, *grpc.ClientConn) {
	t.Helper()
	cmd, logs, exited := startBinary(t, append([]string{"--initiator-name", initiatorIQN, "csi", "--endpoint", "unix://" + sock,
		"--node-id", "node-1", "--pool", pool, "--state-dir", state}, extra...)...)
	t.Cleanup(func() { cmd.Process.Kill() })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("csi exited: %v\n%s", err, logs.String())
		default:
		}
		if _, err := os.Stat(sock); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r, err := csipb.NewIdentityClient(conn).Probe(ctx, &csipb.ProbeRequest{})
			cancel()
			if err == nil && r.GetReady().GetValue() {
				return cmd, logs, exited, conn
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("csi socket not ready after 30 s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopCSI sends SIGTERM and checks a clean exit that removes the socket.
func stopCSI(t *testing.T, cmd *exec.Cmd, logs *lockedBuffer, exited <-chan error, sock string) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("csi after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("csi still running 15 s after SIGTERM:\n%s", logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left after SIGTERM: %v", err)
	}
}

// TestCSISanity runs csi-sanity's Identity, Controller and Node specs against
// iser-attach csi with a pool on tgtd over iSCSI/TCP. Every volume is
// 64 MiB (the smallest LU): the "different capacity" spec needs a LU of
// exactly the test size, and ControllerExpandVolume cannot go beyond a
// volume's LU, so the expansion asks for the size the volume has. The Node
// specs that stage a volume are skipped (csiSanitySkip).
func TestCSISanity(t *testing.T) {
	sanity := csiSanity(t)
	_, pool := csiPool(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	cmd, logs, exited, _ := startCSI(t, sock, pool, filepath.Join(dir, "state"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	san := exec.CommandContext(ctx, sanity, "-csi.endpoint", "unix://"+sock,
		"-csi.testvolumesize", "67108864", "-csi.testvolumeexpandsize", "67108864",
		"-ginkgo.skip", csiSanitySkip, "-ginkgo.no-color", "-ginkgo.v")
	out, err := san.CombinedOutput()
	summary := regexp.MustCompile(`(?m)^Ran \d+ of \d+ Specs.*\n(SUCCESS|FAIL).*$`).FindString(string(out))
	t.Logf("csi-sanity %s: %s", csiSanityVersion, strings.ReplaceAll(summary, "\n", "; "))
	if testing.Verbose() {
		t.Logf("csi-sanity's output:\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), "SUCCESS!") {
		t.Fatalf("csi-sanity: %v\n%s\niser-attach csi:\n%s", err, out, logs.String())
	}
	m := regexp.MustCompile(`(?m)^Ran (\d+) of`).FindStringSubmatch(string(out))
	if m == nil || len(m[1]) < 2 { // fewer than 10 specs ran: the run tested nothing
		t.Fatalf("csi-sanity ran too few specs:\n%s", out)
	}
	stopCSI(t, cmd, logs, exited, sock)
}

// TestCSIRestartKeepsVolumes: a volume created before SIGTERM is there
// after a restart on the same state directory, on the same LU; the stale
// socket of a killed controller is replaced.
func TestCSIRestartKeepsVolumes(t *testing.T) {
	_, pool := csiPool(t)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "csi.sock"), filepath.Join(dir, "state")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createReq := &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: csiBlockCaps,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 100 << 20}}

	cmd, logs, exited, conn := startCSI(t, sock, pool, state)
	v1, err := csipb.NewControllerClient(conn).CreateVolume(ctx, createReq)
	if err != nil {
		t.Fatal(err)
	}
	// LUN 1 is the 128 MiB LU, the smallest of at least 100 MiB.
	if v1.Volume.CapacityBytes != 128<<20 || !strings.HasPrefix(v1.Volume.VolumeId, "iser1:1:naa.") ||
		!strings.HasSuffix(v1.Volume.VolumeId, ":iqn.2026-11.test:csi-pool") {
		t.Fatalf("CreateVolume = %+v", v1.Volume)
	}
	stopCSI(t, cmd, logs, exited, sock)

	cmd, logs, exited, conn = startCSI(t, sock, pool, state)
	ctrl := csipb.NewControllerClient(conn)
	list, err := ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Volume.VolumeId != v1.Volume.VolumeId {
		t.Fatalf("ListVolumes after restart = %+v, %v", list, err)
	}
	v2, err := ctrl.CreateVolume(ctx, createReq)
	if err != nil || v2.Volume.VolumeId != v1.Volume.VolumeId {
		t.Fatalf("CreateVolume after restart = %+v, %v; want %s", v2, err, v1.Volume.VolumeId)
	}
	// SIGKILL leaves the socket; the next controller replaces it.
	cmd.Process.Kill()
	<-exited
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("socket after SIGKILL: %v", err)
	}
	cmd, logs, exited, conn = startCSI(t, sock, pool, state)
	if _, err := csipb.NewControllerClient(conn).DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v1.Volume.VolumeId}); err != nil {
		t.Fatal(err)
	}
	stopCSI(t, cmd, logs, exited, sock)
}

// TestCSIFlagsAndPool: a missing flag or a bad endpoint is a usage mistake
// (exit 2); a pool file with lun, or a pool nobody serves, fails in one
// line before any socket is made.
func TestCSIFlagsAndPool(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	withLUN := filepath.Join(dir, "lun.conf")
	os.WriteFile(withLUN, []byte("portal = 127.0.0.1:9\ntarget = iqn.2026-11.test:x\nlun = 1\n"), 0o644)
	deadPool := filepath.Join(dir, "dead.conf")
	os.WriteFile(deadPool, []byte("portal = 127.0.0.1:9\ntarget = iqn.2026-11.test:x\nlogin_timeout = 2\n"), 0o644)
	typo := filepath.Join(dir, "typo.conf")
	os.WriteFile(typo, []byte("portal = 127.0.0.1:9\ntraget = iqn.2026-11.test:x\n"), 0o644)
	all := func(over ...string) []string {
		args := map[string]string{"--endpoint": "unix://" + sock, "--node-id": "n1", "--pool": deadPool, "--state-dir": filepath.Join(dir, "state")}
		for i := 0; i+1 < len(over); i += 2 {
			args[over[i]] = over[i+1]
		}
		out := []string{"--initiator-name", initiatorIQN, "csi"}
		for _, k := range []string{"--endpoint", "--node-id", "--pool", "--state-dir"} {
			if args[k] != "" {
				out = append(out, k, args[k])
			}
		}
		return out
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{all("--node-id", ""), 2, "csi: required flag --node-id not given"},
		{all("--state-dir", ""), 2, "csi: required flag --state-dir not given"},
		{all("--endpoint", "/run/csi.sock"), 2, `csi: --endpoint: endpoint "/run/csi.sock": want unix:///ABSOLUTE/PATH`},
		{all("--pool", withLUN), 1, "--pool: " + withLUN + ":3: lun: a pool is every disk LUN of the target; leave lun out"},
		{all("--pool", typo), 1, "unknown key (did you mean 'target'?)"},
		{all(), 1, "scan pool:"},
	} {
		_, errs, code := runBinary(t, binary, nil, tc.args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		last := lines[len(lines)-1]
		if code != tc.code || !strings.Contains(last, tc.want) {
			t.Errorf("%q: exit %d, last line %q; want %d and %q\n%s", tc.args, code, last, tc.code, tc.want, errs)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Fatalf("%q: socket made: %v", tc.args, err)
		}
	}
}

// TestCSIWipeOnDelete: with --wipe-on-delete, DeleteVolume zeroes the LUN
// through tgtd (WRITE SAME(16)) before freeing it; without it the data
// stays.
func TestCSIWipeOnDelete(t *testing.T) {
	srv, pool := csiPool(t)
	backing := srv.LUNPath(srv.IQN(), 2) // the 64 MiB LUN
	pattern := bytes.Repeat([]byte{0xa5}, 1<<20)
	fill := func() {
		f, err := os.OpenFile(backing, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, off := range []int64{0, 31 << 20, 63 << 20} {
			if _, err := f.WriteAt(pattern, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	zeroed := func() bool {
		b, err := os.ReadFile(backing)
		if err != nil {
			t.Fatal(err)
		}
		return len(b) == 64<<20 && bytes.Count(b, []byte{0}) == len(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &csipb.CreateVolumeRequest{Name: "pvc-w", VolumeCapabilities: csiBlockCaps,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20, LimitBytes: 64 << 20}}
	for _, wipe := range []bool{false, true} {
		fill()
		dir := t.TempDir()
		sock := filepath.Join(dir, "csi.sock")
		var extra []string
		if wipe {
			extra = []string{"--wipe-on-delete"}
		}
		cmd, logs, exited, conn := startCSI(t, sock, pool, filepath.Join(dir, "state"), extra...)
		ctrl := csipb.NewControllerClient(conn)
		v, err := ctrl.CreateVolume(ctx, req)
		if err != nil || !strings.HasPrefix(v.Volume.VolumeId, "iser1:2:") {
			t.Fatalf("CreateVolume = %+v, %v", v, err)
		}
		if _, err := ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.Volume.VolumeId}); err != nil {
			t.Fatalf("DeleteVolume: %v\n%s", err, logs.String())
		}
		if err := srv.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := zeroed(); got != wipe {
			t.Fatalf("--wipe-on-delete %v: LUN zeroed %v\n%s", wipe, got, logs.String())
		}
		if n := srv.Commands(2, tgttest.OpWriteSame16); (n.Done > 0) != wipe {
			t.Fatalf("--wipe-on-delete %v: WRITE SAME(16) on LUN 2: %+v", wipe, n)
		}
		stopCSI(t, cmd, logs, exited, sock)
	}
}
