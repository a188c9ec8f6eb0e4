package initiator_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// Integration tests against a real tgtd (Debian tgt) on 127.0.0.1.

func tgtLogin(t *testing.T, srv *tgttest.Server, iqn string, mod func(*initiator.SessionConfig)) (*initiator.Session, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cfg := initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.io.iser-attach:test", TargetName: iqn, ISID: initiator.NewISID()}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := initiator.Connect(ctx, initiator.DialConfig{Transport: "tcp", Addr: srv.Portal()}, cfg)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func openLUN(t *testing.T, s *initiator.Session, n uint16) *initiator.LUN {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	l, err := initiator.OpenLUN(ctx, s, n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func roundTrip(t *testing.T, l *initiator.LUN, off int64, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := make([]byte, n)
	rand.Read(data)
	if err := l.WriteAt(ctx, data, off, false); err != nil {
		t.Fatalf("write %d at %d: %v", n, off, err)
	}
	back := make([]byte, n)
	if err := l.ReadAt(ctx, back, off); err != nil {
		t.Fatalf("read %d at %d: %v", n, off, err)
	}
	if !bytes.Equal(back, data) {
		t.Fatalf("%d bytes at %d read back differently", n, off)
	}
}

func TestTgtdSeveralTargetsAndLUNs(t *testing.T) {
	srv := tgttest.Start(t,
		tgttest.Target{IQN: "iqn.2026-11.test:a", LUNs: []tgttest.LUN{{Size: 32 << 20}, {Size: 16 << 20, BlockSize: 4096}}},
		tgttest.Target{IQN: "iqn.2026-11.test:b", LUNs: []tgttest.LUN{{Size: 8 << 20}}})
	for _, c := range []struct {
		iqn       string
		lun       uint16
		size      int64
		blockSize uint32
	}{{"iqn.2026-11.test:a", 1, 32 << 20, 512}, {"iqn.2026-11.test:a", 2, 16 << 20, 4096}, {"iqn.2026-11.test:b", 1, 8 << 20, 512}} {
		s, err := tgtLogin(t, srv, c.iqn, nil)
		if err != nil {
			t.Fatal(err)
		}
		l := openLUN(t, s, c.lun)
		info := l.Info()
		if info.Size() != c.size || info.BlockSize != c.blockSize {
			t.Fatalf("%s LUN %d: %d bytes of %d-byte blocks", c.iqn, c.lun, info.Size(), info.BlockSize)
		}
		if info.Vendor == "" || info.WWN == "" || !strings.HasPrefix(info.WWN, "naa.") {
			t.Fatalf("%s LUN %d: inquiry %+v", c.iqn, c.lun, info)
		}
		for _, n := range []int{int(c.blockSize), 64 << 10, initiator.MaxTransfer, 3 * initiator.MaxTransfer / 2} {
			roundTrip(t, l, int64(c.blockSize)*7, n)
		}
		roundTrip(t, l, c.size-int64(c.blockSize), int(c.blockSize)) // the last block
		s.Close()
	}
}

func TestTgtdLargeLUNUsesReadWrite16(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 3 << 40}}}) // sparse 3 TiB
	s, err := tgtLogin(t, srv, srv.IQN(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := openLUN(t, s, 1)
	if l.Info().Size() != 3<<40 {
		t.Fatalf("size %d", l.Info().Size())
	}
	roundTrip(t, l, (5<<39)+4096, 256<<10) // past 2 TiB: LBA beyond 32 bits
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := srv.Commands(1, tgttest.OpWrite16); c.Done == 0 {
		t.Fatalf("no WRITE(16) reached tgtd: %+v", c)
	}
	if c := srv.Commands(1, tgttest.OpRead16); c.Done == 0 {
		t.Fatalf("no READ(16) reached tgtd: %+v", c)
	}
}

func TestTgtdCHAP(t *testing.T) {
	srv := tgttest.Start(t,
		tgttest.Target{IQN: "iqn.2026-11.test:oneway", CHAP: &tgttest.CHAP{User: "alice", Secret: "alicesecret12"}},
		tgttest.Target{IQN: "iqn.2026-11.test:mutual", CHAP: &tgttest.CHAP{User: "bob", Secret: "bobsecret1234"},
			Mutual: &tgttest.CHAP{User: "tgtd", Secret: "targetsecret1"}})
	creds := func(c *initiator.CHAPCredentials) func(*initiator.SessionConfig) {
		return func(cfg *initiator.SessionConfig) { cfg.CHAP = c }
	}
	t.Run("one-way", func(t *testing.T) {
		s, err := tgtLogin(t, srv, "iqn.2026-11.test:oneway", creds(&initiator.CHAPCredentials{User: "alice", Secret: []byte("alicesecret12")}))
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, openLUN(t, s, 1), 0, 4096)
	})
	t.Run("mutual", func(t *testing.T) {
		s, err := tgtLogin(t, srv, "iqn.2026-11.test:mutual", creds(&initiator.CHAPCredentials{User: "bob", Secret: []byte("bobsecret1234"),
			MutualUser: "tgtd", MutualSecret: []byte("targetsecret1")}))
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, openLUN(t, s, 1), 0, 4096)
	})
	t.Run("wrong secret", func(t *testing.T) {
		_, err := tgtLogin(t, srv, "iqn.2026-11.test:oneway", creds(&initiator.CHAPCredentials{User: "alice", Secret: []byte("wrongsecret12")}))
		if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("wrong mutual secret", func(t *testing.T) {
		_, err := tgtLogin(t, srv, "iqn.2026-11.test:mutual", creds(&initiator.CHAPCredentials{User: "bob", Secret: []byte("bobsecret1234"),
			MutualUser: "tgtd", MutualSecret: []byte("notthesecret1")}))
		if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "mutual") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		_, err := tgtLogin(t, srv, "iqn.2026-11.test:oneway", nil)
		if err == nil {
			t.Fatal("login without CHAP accepted")
		}
	})
}

func TestTgtdMissingLUNAndTarget(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:one"})
	s, err := tgtLogin(t, srv, "iqn.2026-11.test:one", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := initiator.OpenLUN(ctx, s, 9); !errors.Is(err, initiator.ErrLUNNotFound) {
		t.Fatalf("LUN 9: %v", err)
	}
	_, err = tgtLogin(t, srv, "iqn.2026-11.test:nope", nil)
	var le *initiator.LoginError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("unknown target: %v", err)
	}
}

func TestTgtdDigests(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{})
	for _, key := range []string{"HeaderDigest", "DataDigest"} {
		if out, err := srv.Tgtadm(context.Background(), "--lld", "iscsi", "--op", "update", "--mode", "target",
			"--tid", "1", "--name", key, "--value", "CRC32C,None"); err != nil {
			t.Fatalf("tgtadm %s: %v %s", key, err, out)
		}
	}
	s, err := tgtLogin(t, srv, srv.IQN(), func(c *initiator.SessionConfig) {
		c.Want = initiator.DefaultWant()
		c.Want.HeaderDigest, c.Want.DataDigest = true, true
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Params(); !p.HeaderDigest || !p.DataDigest {
		t.Fatalf("digests not negotiated: %+v", p)
	}
	l := openLUN(t, s, 1)
	roundTrip(t, l, 4096, 1<<20)
	roundTrip(t, l, 0, 1000*512) // a data segment that needs padding checks
}

func TestTgtdFlushTrimZeroReachTarget(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: 64 << 20, ThinProvisioning: true}}})
	s, err := tgtLogin(t, srv, srv.IQN(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := openLUN(t, s, 1)
	info := l.Info()
	if !info.ThinProvisioned || !info.Unmap {
		t.Fatalf("thin LUN: %+v", info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := bytes.Repeat([]byte{0xa5}, 4<<20)
	if err := l.WriteAt(ctx, data, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, _ := tgttest.AllocatedBytes(srv.LUNPath(srv.IQN(), 1))
	if err := l.Trim(ctx, 0, 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteZeroes(ctx, 2<<20, 1<<20, false, false); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 4<<20)
	if err := l.ReadAt(ctx, back, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back[:3<<20], make([]byte, 3<<20)) || !bytes.Equal(back[3<<20:], data[3<<20:]) {
		t.Fatal("trimmed and zeroed ranges do not read back as zeros, or the rest changed")
	}
	if err := srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := tgttest.AllocatedBytes(srv.LUNPath(srv.IQN(), 1))
	if after >= before {
		t.Errorf("UNMAP freed nothing in the backing file: %d -> %d bytes allocated", before, after)
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
