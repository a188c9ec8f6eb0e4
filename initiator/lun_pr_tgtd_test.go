package initiator_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/scsi"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestTgtdPersistentReservation fences one LUN between two initiators on
// tgtd, as two CSI nodes would: A registers and holds Write Exclusive,
// Registrants Only; B, unregistered, cannot write (RESERVATION CONFLICT,
// EBADE as Linux reports it) but can read, and sees A's key as the
// holder's (tgt has no READ FULL STATUS to name A); B's own RESERVE
// conflicts; A's release lets B reserve; then B preempts A's registration
// (a node that is gone), and A's writes and stale key conflict.
func TestTgtdPersistentReservation(t *testing.T) {
	const iqn = "iqn.2026-11.test:pr"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn, LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	login := func(name string) *initiator.LUN {
		s, err := tgtLogin(t, srv, iqn, func(c *initiator.SessionConfig) { c.InitiatorName = name })
		if err != nil {
			t.Fatal(err)
		}
		return openLUN(t, s, 1)
	}
	a := login("iqn.2026-11.io.iser-attach:node-a")
	b := login("iqn.2026-11.io.iser-attach:node-b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const keyA, keyB = 0xa0a0a0a0a0a0a0a0, 0xb0b0b0b0b0b0b0b0
	wero := scsi.PRWriteExclusiveRegistrantsOnly
	block := make([]byte, 512)

	if err := a.PROut(ctx, scsi.PROutRegisterAndIgnoreExisting, 0, scsi.PROutParameters{ActionKey: keyA}); err != nil {
		t.Fatal(err)
	}
	if err := a.PROut(ctx, scsi.PROutReserve, wero, scsi.PROutParameters{Key: keyA}); err != nil {
		t.Fatal(err)
	}
	// Reserving again with the same key and type is no conflict (SPC-4 5.13.7): a
	// restarted node plugin does it.
	if err := a.PROut(ctx, scsi.PROutReserve, wero, scsi.PROutParameters{Key: keyA}); err != nil {
		t.Fatalf("reserve again: %v", err)
	}
	if err := a.WriteAt(ctx, block, 0, false); err != nil {
		t.Fatalf("holder's write: %v", err)
	}

	// B, unregistered: no write, reads fine, sees the holder.
	err := b.WriteAt(ctx, block, 4096, false)
	var en interface{ Errno() syscall.Errno }
	if err == nil || !errors.As(err, &en) || en.Errno() != syscall.EBADE {
		t.Fatalf("unregistered write: %v, want RESERVATION CONFLICT (EBADE)", err)
	}
	if err := b.ReadAt(ctx, block, 0); err != nil {
		t.Fatalf("unregistered read: %v", err)
	}
	r, err := b.ReadReservation(ctx)
	if err != nil || !r.Reserved || r.Key != keyA || r.Type != wero {
		t.Fatalf("READ RESERVATION = %+v, %v; want held by %#x, %v", r, err, uint64(keyA), wero)
	}
	// tgt has no READ FULL STATUS: ILLEGAL REQUEST, and the holder is known
	// by its key alone (LIO names its initiator port; 85-csi-node checks).
	var sense *scsi.SenseError
	if st, err := b.ReadFullStatus(ctx); !errors.As(err, &sense) || sense.Key != scsi.KeyIllegalRequest {
		t.Fatalf("READ FULL STATUS = %+v, %v; tgt answers ILLEGAL REQUEST", st, err)
	}
	// B's RESERVE with its own key while A holds it conflicts.
	if err := b.PROut(ctx, scsi.PROutRegisterAndIgnoreExisting, 0, scsi.PROutParameters{ActionKey: keyB}); err != nil {
		t.Fatal(err)
	}
	err = b.PROut(ctx, scsi.PROutReserve, wero, scsi.PROutParameters{Key: keyB})
	if !errors.Is(err, initiator.ErrReservationConflict) {
		t.Fatalf("second RESERVE = %v, want %v", err, initiator.ErrReservationConflict)
	}
	k, err := b.ReadKeys(ctx)
	if err != nil || !slices.Contains(k.Keys, keyA) || !slices.Contains(k.Keys, keyB) {
		t.Fatalf("READ KEYS = %+v, %v", k, err)
	}
	// Registered, B may write under Registrants Only.
	if err := b.WriteAt(ctx, block, 4096, false); err != nil {
		t.Fatalf("registrant's write: %v", err)
	}
	if err := b.PROut(ctx, scsi.PROutRegister, 0, scsi.PROutParameters{Key: keyB}); err != nil {
		t.Fatalf("unregister B: %v", err)
	}

	// A releases and unregisters (unstage); B takes it.
	if err := a.PROut(ctx, scsi.PROutRelease, wero, scsi.PROutParameters{Key: keyA}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.ReadReservation(ctx); err != nil || r.Reserved {
		t.Fatalf("after release: %+v, %v", r, err)
	}
	if err := b.PROut(ctx, scsi.PROutRegisterAndIgnoreExisting, 0, scsi.PROutParameters{ActionKey: keyB}); err != nil {
		t.Fatal(err)
	}
	if err := b.PROut(ctx, scsi.PROutReserve, wero, scsi.PROutParameters{Key: keyB}); err != nil {
		t.Fatalf("B's reserve after A's release: %v", err)
	}
	// A is still registered: PREEMPT removes it (a node that is gone).
	if err := b.PROut(ctx, scsi.PROutPreempt, wero, scsi.PROutParameters{Key: keyB, ActionKey: keyA}); err != nil {
		t.Fatalf("preempt A: %v", err)
	}
	k, err = a.ReadKeys(ctx)
	if err != nil || !slices.Equal(k.Keys, []uint64{keyB}) {
		t.Fatalf("READ KEYS after preempt = %+v, %v; want only B's", k, err)
	}
	if err := a.WriteAt(ctx, block, 0, false); !errors.As(err, &en) || en.Errno() != syscall.EBADE {
		t.Fatalf("preempted A's write: %v, want RESERVATION CONFLICT", err)
	}
	// A stale key is refused: A's REGISTER with its old key conflicts.
	err = a.PROut(ctx, scsi.PROutRegister, 0, scsi.PROutParameters{Key: keyA})
	if !errors.Is(err, initiator.ErrReservationConflict) {
		t.Fatalf("REGISTER with a preempted key = %v, want a conflict", err)
	}
}

// TestTgtdFence: Fence and Unfence between two nodes on tgtd, one of them
// multipath (two portals of one tgtd: two I_T nexuses, both registered,
// the second when its path comes up after the fence).
// A second node's Fence is refused naming the holder's key and registers
// nothing; with preempt it takes the LUN, and the first node's writes
// conflict on every path; Unfence leaves no key behind.
func TestTgtdFence(t *testing.T) {
	const iqn = "iqn.2026-11.test:fence"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn, LUNs: []tgttest.LUN{{Size: 16 << 20}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, port, _ := net.SplitHostPort(srv.Portal())
	second := net.JoinHostPort("127.0.0.2", port)
	// The second portal comes later: its path logs in after the fence and
	// registers before it carries I/O.
	cfg := initiator.MultipathConfig{NoPathTimeout: 3 * time.Second, RetryDown: 100 * time.Millisecond}
	for i, portal := range []string{srv.Portal(), second} {
		cfg.Paths = append(cfg.Paths, initiator.NexusConfig{
			Portals: []string{portal},
			Dial:    initiator.DialConfig{Transport: initiator.TransportTCP},
			Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
				InitiatorName: "iqn.2026-11.io.iser-attach:node-a", TargetName: iqn,
				ISID: initiator.ISIDFromName(fmt.Sprint("fence", i))}},
		})
	}
	m, err := initiator.DialMultipath(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, err := initiator.OpenLUN(ctx, m, 1)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := tgtLogin(t, srv, iqn, func(c *initiator.SessionConfig) { c.InitiatorName = "iqn.2026-11.io.iser-attach:node-b" })
	if err != nil {
		t.Fatal(err)
	}
	b := openLUN(t, sb, 1)
	const keyA, keyB = 0xa1, 0xb2
	block := make([]byte, 4096)
	conflict := func(who string, l *initiator.LUN) {
		t.Helper()
		var en interface{ Errno() syscall.Errno }
		if err := l.WriteAt(ctx, block, 0, false); !errors.As(err, &en) || en.Errno() != syscall.EBADE {
			t.Fatalf("%s's write: %v, want RESERVATION CONFLICT", who, err)
		}
	}
	keys := func(want ...uint64) {
		t.Helper()
		k, err := b.ReadKeys(ctx)
		if err != nil || !slices.Equal(k.Keys, want) {
			t.Fatalf("READ KEYS = %+v, %v; want %#x", k.Keys, err, want)
		}
	}

	if f, err := a.Fence(ctx, keyA, false); err != nil || f.Preempted != 0 {
		t.Fatalf("A fences: %+v, %v", f, err)
	}
	keys(keyA) // the one path up
	if _, err := srv.Tgtadm(ctx, "--mode", "portal", "--op", "new", "--param", "portal="+second); err != nil {
		t.Fatalf("second portal: %v", err)
	}
	for m.Paths()[1].State != initiator.PathUp {
		if ctx.Err() != nil {
			t.Fatalf("second path never up: %+v", m.Paths())
		}
		time.Sleep(50 * time.Millisecond)
	}
	keys(keyA, keyA) // one registration per path
	if _, err := a.Fence(ctx, keyA, false); err != nil {
		t.Fatalf("A fences again (a restarted daemon): %v", err)
	}
	for i := range 8 { // round-robin: both paths write
		if err := a.WriteAt(ctx, block, int64(i)*4096, false); err != nil {
			t.Fatalf("A's write %d: %v", i, err)
		}
	}
	if p := m.Paths(); p[0].IOs == 0 || p[1].IOs == 0 {
		t.Fatalf("paths %+v: want I/O on both", p)
	}

	_, err = b.Fence(ctx, keyB, false)
	var re *initiator.ReservedError
	if !errors.As(err, &re) || re.Key != keyA || re.Type != initiator.FenceType {
		t.Fatalf("B fences: %v, want reserved by %#x", err, keyA)
	}
	keys(keyA, keyA) // B registered nothing
	conflict("B", b)

	f, err := b.Fence(ctx, keyB, true)
	if err != nil || f.Preempted != keyA {
		t.Fatalf("B preempts: %+v, %v", f, err)
	}
	keys(keyB)
	for range 4 {
		conflict("preempted A", a)
	}
	if err := b.WriteAt(ctx, block, 0, false); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if err := b.Unfence(ctx, keyB); err != nil {
		t.Fatal(err)
	}
	keys()
	if r, err := b.ReadReservation(ctx); err != nil || r.Reserved {
		t.Fatalf("after unfence: %+v, %v", r, err)
	}
	// A fences again (B unstaged): registered on both paths once more.
	if _, err := a.Fence(ctx, keyA, false); err != nil {
		t.Fatal(err)
	}
	keys(keyA, keyA)
	if err := a.Unfence(ctx, keyA); err != nil {
		t.Fatal(err)
	}
	keys()
}
