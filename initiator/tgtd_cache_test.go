package initiator_test

import (
	"context"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// tgtCachingPage is tgt-admin's "write-cache on|off": the caching mode page
// with WCE (0x04) set or clear.
func tgtCachingPage(wce bool) string {
	b0 := "0x10"
	if wce {
		b0 = "0x14"
	}
	return "mode_page=8:0:18:" + b0 + ":0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0"
}

// TestTgtdWriteCacheChangeSeenAfterReinstatement: tgtd's write cache is
// turned off (tgtadm, as tgt-admin's write-cache off) and its connections
// dropped; the Nexus reinstates the session and the LUN, reading the
// caching page again, tells the frontend the cache is now write-through,
// then on again.
func TestTgtdWriteCacheChangeSeenAfterReinstatement(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	_, l, _ := dialRecoveryNexus(t, srv, 30*time.Second)
	if !l.Info().WriteCache {
		t.Fatal("tgtd reports no write cache; it enables one by default")
	}
	changes := cacheWatch(l, true, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, wce := range []bool{false, true} {
		if _, err := srv.Tgtadm(ctx, "--mode", "logicalunit", "--op", "update", "--tid", "1", "--lun", "1",
			"--params", tgtCachingPage(wce)); err != nil {
			t.Fatal(err)
		}
		if n, err := srv.DropConnections(ctx, srv.IQN()); err != nil || n == 0 {
			t.Fatalf("drop connections: %d, %v", n, err)
		}
		waitChange(t, changes, wce)
		if l.Info().WriteCache != wce {
			t.Fatalf("Info().WriteCache %v after the re-probe, want %v", l.Info().WriteCache, wce)
		}
	}
}

// modeSelectCaching sends MODE SELECT(10) on s with tgtd's caching page,
// WCE set or clear, as another initiator changing the cache would.
func modeSelectCaching(t *testing.T, s *initiator.Session, wce bool) {
	t.Helper()
	ctx := ctx5(t)
	buf := make([]byte, 255)
	r, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: []byte{0x5a, 0x08, 0x08, 0, 0, 0, 0, 0, 255, 0}, Read: buf})
	if err != nil || r.Status != 0 {
		t.Fatalf("MODE SENSE(10): %v %+v", err, r)
	}
	n := r.Transferred(len(buf))
	if n < 8+20 || buf[8]&0x3f != 0x08 {
		t.Fatalf("MODE SENSE(10) caching page: % x", buf[:n])
	}
	param := append([]byte(nil), buf[:8+20]...)
	param[0], param[1] = 0, 0 // MODE DATA LENGTH is reserved in MODE SELECT
	param[8] &= 0x7f          // PS
	param[8+2] &^= 0x04
	if wce {
		param[8+2] |= 0x04
	}
	cdb := []byte{0x55, 0x10, 0, 0, 0, 0, 0, 0, byte(len(param)), 0}
	if r, err := s.Do(ctx, &initiator.Command{LUN: [8]byte{0, 1}, CDB: cdb, Write: param}); err != nil || r.Status != 0 {
		t.Fatalf("MODE SELECT(10): %v %+v sense % x", err, r, r.Sense)
	}
}

// TestTgtdWriteCacheChangeSeenOnModeParametersChanged: another initiator
// turns tgtd's write cache off with MODE SELECT; tgtd raises UNIT
// ATTENTION MODE PARAMETERS CHANGED on our nexus, and the LUN, reading the
// caching page again, tells the frontend; then back on.
func TestTgtdWriteCacheChangeSeenOnModeParametersChanged(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	_, l, _ := dialRecoveryNexus(t, srv, 30*time.Second)
	other, err := tgtLogin(t, srv, srv.IQN(), nil)
	if err != nil {
		t.Fatal(err)
	}
	openLUN(t, other, 1) // clears its power-on unit attention
	changes := cacheWatch(l, true, true)
	for _, wce := range []bool{false, true} {
		modeSelectCaching(t, other, wce)
		if err := l.ReadAt(ctx5(t), make([]byte, 512), 0); err != nil {
			t.Fatal(err)
		}
		waitChange(t, changes, wce)
	}
}
