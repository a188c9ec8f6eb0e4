package initiator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// fakePortals serves every connection a Nexus makes with a handler chosen
// per connection, and records the logins.
type fakePortals struct {
	t       *testing.T
	mu      sync.Mutex
	down    map[string]bool // portals that refuse connections
	logins  []pdu.LoginRequest
	firsts  []int    // index in logins of each connection's first Login Request
	portals []string // portal of each connection
	// handler returns the full feature phase handler for connection n (0-based).
	handler func(n int) func(t *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply
	// setup, when set, prepares connection n's target before the login.
	setup func(n int, t *iscsitest.Target)
}

func (f *fakePortals) connect(ctx context.Context, dc initiator.DialConfig, sc initiator.SessionConfig) (*initiator.Session, error) {
	f.mu.Lock()
	if f.down[dc.Addr] {
		f.mu.Unlock()
		return nil, fmt.Errorf("dial %s: %w", dc.Addr, syscall.ECONNREFUSED)
	}
	n := len(f.portals)
	f.portals = append(f.portals, dc.Addr)
	f.firsts = append(f.firsts, len(f.logins))
	ffp := f.handler(n)
	f.mu.Unlock()
	conn, _ := iscsitest.Pipe(f.t, func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() == pdu.OpLoginReq {
			if f.setup != nil && len(tg.Seen()) == 1 {
				f.setup(n, tg)
			}
			var lr pdu.LoginRequest
			_ = lr.Unmarshal(&req.BHS)
			f.mu.Lock()
			f.logins = append(f.logins, lr)
			f.mu.Unlock()
			return tg.Login(req, iscsitest.LoginOptions{})
		}
		return ffp(tg, req)
	})
	return initiator.NewSession(ctx, initiator.NewTCPDatamover(conn), sc)
}

func (f *fakePortals) setDown(addr string, down bool) {
	f.mu.Lock()
	f.down[addr] = down
	f.mu.Unlock()
}

func (f *fakePortals) conns() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.portals...)
}

func dialNexus(t *testing.T, f *fakePortals, mod func(*initiator.NexusConfig)) *initiator.Nexus {
	t.Helper()
	cfg := initiator.NexusConfig{
		Portals: []string{"p1:3260", "p2:3260"},
		Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
			InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:tgt",
			ISID: initiator.ISIDFromName("vol")}, NOPInterval: -1, QueueDepth: 8},
		ReplacementTimeout: 10 * time.Second,
		MinBackoff:         5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	}
	initiator.SetNexusConnect(&cfg, f.connect)
	if mod != nil {
		mod(&cfg)
	}
	nx, err := initiator.DialNexus(ctx5(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nx.Close() })
	return nx
}

func write10(data []byte) *initiator.Command {
	return &initiator.Command{LUN: [8]byte{0, 1}, CDB: []byte{0x2a, 0, 0, 0, 0, 8, 0, 0, byte(len(data) / 512), 0}, Write: data}
}

// dropFirstCommand closes connection 0 when a SCSI command arrives on it,
// without answering; later connections answer everything.
func dropFirstCommand(seen *[][]byte, mu *sync.Mutex) func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
	return func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			if req.BHS.Opcode() == pdu.OpSCSICommand {
				mu.Lock()
				*seen = append(*seen, append([]byte(nil), req.Data...))
				mu.Unlock()
				if n == 0 {
					return []iscsitest.Reply{{Close: true}}
				}
			}
			return tg.Good(req)
		}
	}
}

func TestNexusReissuesInFlightCommandOnReinstatedSession(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	f := &fakePortals{t: t, down: map[string]bool{}, handler: dropFirstCommand(&seen, &mu)}
	nx := dialNexus(t, f, nil)
	data := make([]byte, 1024)
	for i := range data {
		data[i] = byte(i)
	}
	r, err := nx.Do(ctx5(t), write10(data))
	if err != nil || r.Status != 0 {
		t.Fatalf("write across a dropped connection: %v %+v", err, r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || string(seen[0]) != string(data) || string(seen[1]) != string(data) {
		t.Fatalf("target saw %d writes; want the same write on both connections", len(seen))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.firsts) != 2 {
		t.Fatalf("%d connections, want 2", len(f.firsts))
	}
	first, last := f.logins[f.firsts[0]], f.logins[f.firsts[1]]
	if first.ISID != last.ISID || last.TSIH != 0 {
		t.Fatalf("reinstatement login: ISID %x (first %x), TSIH %d; want the same ISID and TSIH 0", last.ISID, first.ISID, last.TSIH)
	}
	st := nx.Status()
	if st.State != initiator.NexusUp || st.Recoveries != 1 || st.Faults != 1 || st.LastError == nil {
		t.Fatalf("status %+v, want up after 1 fault and 1 recovery", st)
	}
}

func TestNexusReplacementTimeoutFailsIOWithEIOThenRecovers(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	f := &fakePortals{t: t, down: map[string]bool{}, handler: dropFirstCommand(&seen, &mu)}
	nx := dialNexus(t, f, func(c *initiator.NexusConfig) {
		c.Portals = c.Portals[:1]
		c.ReplacementTimeout = 200 * time.Millisecond
	})
	f.setDown("p1:3260", true)
	start := time.Now()
	_, err := nx.Do(ctx5(t), write10(make([]byte, 512)))
	var en interface{ Errno() syscall.Errno }
	if !errors.Is(err, initiator.ErrReplacementTimeout) || !errors.As(err, &en) || en.Errno() != syscall.EIO {
		t.Fatalf("write with the target gone: %v, want the replacement timeout as EIO", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the error came after %v", d)
	}
	if st := nx.Status(); st.State != initiator.NexusFailed {
		t.Fatalf("state %v, want failed", st.State)
	}
	// New I/O fails at once while the target stays away.
	if _, err := nx.Do(ctx5(t), write10(make([]byte, 512))); !errors.Is(err, initiator.ErrReplacementTimeout) {
		t.Fatalf("I/O after the timeout: %v", err)
	}
	f.setDown("p1:3260", false)
	deadline := time.Now().Add(5 * time.Second)
	for nx.Status().State != initiator.NexusUp {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery once the target is back: %+v", nx.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := nx.Do(ctx5(t), write10(make([]byte, 512))); err != nil {
		t.Fatalf("I/O after recovery: %v", err)
	}
}

func TestNexusRecoveryTriesTheNextPortal(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	f := &fakePortals{t: t, down: map[string]bool{}, handler: dropFirstCommand(&seen, &mu)}
	nx := dialNexus(t, f, nil)
	f.setDown("p1:3260", true)
	if _, err := nx.Do(ctx5(t), write10(make([]byte, 512))); err != nil {
		t.Fatal(err)
	}
	conns := f.conns()
	if len(conns) != 2 || conns[0] != "p1:3260" || conns[1] != "p2:3260" {
		t.Fatalf("connections to %v, want p1 then p2", conns)
	}
	if st := nx.Status(); st.Portal != "p2:3260" {
		t.Fatalf("status portal %s, want p2:3260", st.Portal)
	}
}

func TestNexusFirstLoginFallsBackToTheNextPortal(t *testing.T) {
	f := &fakePortals{t: t, down: map[string]bool{"p1:3260": true}, handler: func(int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply { return tg.Good(req) }
	}}
	nx := dialNexus(t, f, nil)
	if st := nx.Status(); st.Portal != "p2:3260" {
		t.Fatalf("portal %s, want p2:3260", st.Portal)
	}
	f.setDown("p2:3260", true)
	cfg := initiator.NexusConfig{Portals: []string{"p1:3260", "p2:3260"}}
	initiator.SetNexusConnect(&cfg, f.connect)
	if _, err := initiator.DialNexus(ctx5(t), cfg); err == nil {
		t.Fatal("DialNexus with every portal down succeeded")
	}
}

func TestNexusKeepaliveDetectsASilentTargetAndRecovers(t *testing.T) {
	f := &fakePortals{t: t, down: map[string]bool{}, handler: func(n int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			if n == 0 && req.BHS.Opcode() == pdu.OpNOPOut {
				return nil // the first connection went silent
			}
			return tg.Good(req)
		}
	}}
	nx := dialNexus(t, f, func(c *initiator.NexusConfig) {
		c.Session.NOPInterval = 20 * time.Millisecond
		c.Session.NOPTimeout = 50 * time.Millisecond
	})
	deadline := time.Now().Add(5 * time.Second)
	for nx.Status().Recoveries == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after the keepalive timeout: %+v", nx.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := nx.Status(); st.LastError == nil || !strings.Contains(st.LastError.Error(), "keepalive") {
		t.Fatalf("last error %v, want the keepalive timeout", st.LastError)
	}
}

func TestNexusCloseReleasesIOWaitingForRecovery(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	f := &fakePortals{t: t, down: map[string]bool{}, handler: dropFirstCommand(&seen, &mu)}
	nx := dialNexus(t, f, func(c *initiator.NexusConfig) { c.Portals = c.Portals[:1] })
	f.setDown("p1:3260", true)
	var done atomic.Bool
	errc := make(chan error, 1)
	go func() {
		_, err := nx.Do(context.Background(), write10(make([]byte, 512)))
		done.Store(true)
		errc <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for nx.Status().State != initiator.NexusRecovering {
		if time.Now().After(deadline) {
			t.Fatal("never recovering")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if done.Load() {
		t.Fatal("I/O returned while recovery runs, before the replacement timeout")
	}
	nx.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, initiator.ErrSessionClosed) {
			t.Fatalf("waiting I/O got %v, want ErrSessionClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not release the waiting I/O")
	}
	if st := nx.Status(); st.State != initiator.NexusClosed {
		t.Fatalf("state %v after Close", st.State)
	}
}

// A portal given with a portal group tag (ip:port,tpgt) is used only when
// the target answers that tag (iscsitest answers 1): a portal that answers
// another is logged out and the next one tried; when none answers it, the
// error names both tags.
func TestNexusChecksThePortalGroupTag(t *testing.T) {
	good := func(int) func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply {
		return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply { return tg.Good(req) }
	}
	f := &fakePortals{t: t, down: map[string]bool{}, handler: good}
	nx := dialNexus(t, f, func(cfg *initiator.NexusConfig) { cfg.PortalGroupTags = []int{2, 1} })
	if st := nx.Status(); st.Portal != "p2:3260" {
		t.Fatalf("portal %s, want p2:3260 (p1 answered tag 1, not 2)", st.Portal)
	}
	f = &fakePortals{t: t, down: map[string]bool{}, handler: good}
	dialNexus(t, f, func(cfg *initiator.NexusConfig) { cfg.PortalGroupTags = []int{-1, 7} }) // -1: any tag

	cfg := initiator.NexusConfig{Portals: []string{"p1:3260"}, PortalGroupTags: []int{2},
		Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
			InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:tgt"}, NOPInterval: -1, QueueDepth: 8}}
	initiator.SetNexusConnect(&cfg, f.connect)
	_, err := initiator.DialNexus(ctx5(t), cfg)
	var te *initiator.PortalGroupTagError
	if !errors.As(err, &te) || te.Want != 2 || te.Got != 1 {
		t.Fatalf("DialNexus: %v, want a PortalGroupTagError 2 vs 1", err)
	}
	want := "login to iqn.2026-11.test:tgt at p1:3260: the target answered portal group tag 1, the portal was given with tag 2 (p1:3260,2)"
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

// A recovery attempt whose connection goes into a silent portal is given
// up after RecoveryConnectTimeout, not LoginTimeout, and the next one lands:
// a multipath path is back soon after its portal. The login exchange keeps
// the whole LoginTimeout (a target that holds a login given up early would
// otherwise refuse the next ones).
func TestNexusRecoveryConnectTimeout(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	f := &fakePortals{t: t, down: map[string]bool{}, handler: dropFirstCommand(&seen, &mu)}
	var calls atomic.Int32
	var silent, loginBudget, connectBound time.Duration
	connect := func(ctx context.Context, dc initiator.DialConfig, sc initiator.SessionConfig) (*initiator.Session, error) {
		if calls.Add(1) == 2 { // the first attempt of recovery: its connection has no answer
			start := time.Now()
			dl, _ := ctx.Deadline()
			loginBudget, connectBound = time.Until(dl), dc.ConnectTimeout
			dctx, cancel := context.WithTimeout(ctx, dc.ConnectTimeout) // as connectOnce's dial
			defer cancel()
			<-dctx.Done()
			silent = time.Since(start)
			return nil, dctx.Err()
		}
		return f.connect(ctx, dc, sc)
	}
	nx := dialNexus(t, f, func(cfg *initiator.NexusConfig) {
		cfg.Portals = cfg.Portals[:1]
		cfg.LoginTimeout = 10 * time.Second
		cfg.RecoveryConnectTimeout = 200 * time.Millisecond
		initiator.SetNexusConnect(cfg, connect)
	})
	if _, err := nx.Do(ctx5(t), write10(make([]byte, 512))); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 || silent > 2*time.Second {
		t.Fatalf("%d logins, the silent connection waited %v; want 3, about 200ms", n, silent)
	}
	if connectBound != 200*time.Millisecond || loginBudget < 9*time.Second {
		t.Fatalf("recovery attempt: connect bound %v, whole attempt %v; want 200ms and the 10 s login timeout", connectBound, loginBudget)
	}
}
