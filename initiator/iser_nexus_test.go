package initiator_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/isertest"
)

// TestNexusISERBuffersPinnedOncePerConnection: a Nexus over iSER with
// I/O buffers (as ublk's) registers them with every connection it makes,
// and each connection pins them once, not a second bounce set as large;
// I/O through the buffers works before and after a reconnect.
func TestNexusISERBuffersPinnedOncePerConnection(t *testing.T) {
	const depth, blocks = 32, 32 << 10 // 16 MiB disk
	nx, fake := dialFakeISERNexus(t, "vol", depth, blocks)
	bufs, err := nx.IOBuffers(depth, initiator.MaxTransfer)
	if err != nil || len(bufs) != depth {
		t.Fatalf("IOBuffers: %d, %v", len(bufs), err)
	}
	ioBytes := int64(depth * initiator.MaxTransfer)
	roundTrips := func(round int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, depth)
		for i := range depth / 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, r := bufs[2*i], bufs[2*i+1]
				rand.Read(w)
				lba := uint64(i * initiator.MaxTransfer / 512)
				nb := uint32(initiator.MaxTransfer / 512)
				if res, err := nx.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x8a, lba, nb), Write: w}); err != nil || res.Status != 0 {
					errs <- err
					return
				}
				if res, err := nx.Do(ctx5(t), &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x88, lba, nb), Read: r}); err != nil || res.Status != 0 {
					errs <- err
					return
				}
				if !bytes.Equal(w, r) {
					t.Errorf("round %d, buffer pair %d: read differs from write", round, i)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	checkPinned := func(fc *isertest.Conn) {
		t.Helper()
		// Besides the I/O buffers: the control region and the first chunk
		// of the bounce pool (8 slots), registered at connect for the
		// LUN's control commands.
		const bounceChunk = 8 * initiator.MaxTransfer
		got := fc.RegisteredBytes()
		if got < ioBytes || got-ioBytes > ioBytes/4+bounceChunk {
			t.Fatalf("connection pins %d MiB for %d MiB of I/O buffers: want them once plus a little", got>>20, ioBytes>>20)
		}
		if uses := fc.RKeyUses(); uses[0x9003] < depth {
			t.Fatalf("RDMA accesses per rkey %v: the I/O buffers (0x9003, after the control region and the bounce chunk) were not used zero-copy", uses)
		}
	}
	roundTrips(1)
	first := fake.conn(0)
	checkPinned(first)

	first.Disconnect()
	deadline := time.Now().Add(5 * time.Second)
	for nx.Status().Recoveries == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if nx.Status().Recoveries == 0 {
		t.Fatal("the nexus did not reinstate the session")
	}
	roundTrips(2)
	second := fake.conn(-1)
	if second == first {
		t.Fatal("no new connection")
	}
	checkPinned(second)
}

// TestNexusISERCommandBetweenConnectionAndSessionFailure: LIO disabling
// its TPG (the VM lab's soak) ends the RDMA connection; the datamover sees
// the flushed receives before the session's reader learns of the end, and
// a command started in between (with Do or Submit) must be reissued on the
// next session like the ones in flight, not failed alone (ublk returned
// EIO for such writes).
func TestNexusISERCommandBetweenConnectionAndSessionFailure(t *testing.T) {
	for _, submit := range []bool{false, true} {
		name := "Do"
		if submit {
			name = "Submit"
		}
		t.Run(name, func(t *testing.T) { testCommandBetweenFailures(t, submit) })
	}
}

func testCommandBetweenFailures(t *testing.T, submit bool) {
	const depth, blocks = 8, 2048
	nx, fake := dialFakeISERNexus(t, "vol", depth, blocks)
	first := fake.conn(0)

	held := first.HoldDrain()
	first.Disconnect()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the datamover did not take the flushed receives")
	}
	if st := nx.Status(); st.State != initiator.NexusUp {
		t.Fatalf("nexus %v before the session learnt of the end: the test needs the window", st.State)
	}
	w := make([]byte, 4096)
	rand.Read(w)
	c := &initiator.Command{LUN: [8]byte{0, 1}, CDB: rw16(0x8a, 8, 8), Write: w}
	var x outcome
	if submit {
		o := make(outcomes, 1)
		if err := nx.Submit(c, o, 1); err != nil {
			t.Fatal(err)
		}
		x = o.next(t)
	} else {
		res, err := nx.Do(ctx5(t), c)
		x.err = err
		if res != nil {
			x.status = res.Status
		}
	}
	if x.err != nil {
		t.Fatalf("write started after the connection failed: %v (want it reissued on the next session)", x.err)
	}
	if x.status != 0 {
		t.Fatalf("write status %#x", x.status)
	}
	if nx.Status().Recoveries == 0 {
		t.Fatal("no recovery, yet the write succeeded")
	}
	last := fake.conn(-1)
	if last == first || !bytes.Equal(last.Target().Disk()[8*512:16*512], w) {
		t.Fatal("the write did not reach the target through the next session")
	}
}

// fakeISERNexusConfig is the configuration of a Nexus over isertest
// connections: quick backoff, no keepalive.
func fakeISERNexusConfig(volume string, depth int) initiator.NexusConfig {
	return initiator.NexusConfig{
		Portals: []string{"fake-iser:3260"},
		Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
			InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:fake",
			ISID: initiator.ISIDFromName(volume)}, NOPInterval: -1, QueueDepth: depth},
		ReplacementTimeout: 10 * time.Second,
		MinBackoff:         5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	}
}

// fakeISERConns are the isertest connections a Nexus made, in order; every
// one serves the same LU (the disk is copied over to the next).
type fakeISERConns struct {
	mu    sync.Mutex
	conns []*isertest.Conn
	disk  []byte
}

// conn returns connection i; negative counts from the last.
func (f *fakeISERConns) conn(i int) *isertest.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i < 0 {
		i += len(f.conns)
	}
	return f.conns[i]
}

func (f *fakeISERConns) connect(blocks, depth int) func(context.Context, initiator.DialConfig, initiator.SessionConfig) (*initiator.Session, error) {
	return func(ctx context.Context, _ initiator.DialConfig, sc initiator.SessionConfig) (*initiator.Session, error) {
		fc := isertest.NewConn(blocks)
		f.mu.Lock()
		if f.disk != nil {
			copy(fc.Target().Disk(), f.disk) // the same LU behind every connection
		}
		f.disk = fc.Target().Disk()
		f.conns = append(f.conns, fc)
		f.mu.Unlock()
		dm, err := initiator.NewISERDatamover(fc, depth)
		if err != nil {
			return nil, err
		}
		return initiator.NewSession(ctx, dm, sc)
	}
}

// dialFakeISERNexus dials a Nexus for volume whose connections are
// isertest ones with a disk of blocks 512-byte blocks; Close at cleanup.
func dialFakeISERNexus(tb testing.TB, volume string, depth, blocks int) (*initiator.Nexus, *fakeISERConns) {
	tb.Helper()
	f := &fakeISERConns{}
	cfg := fakeISERNexusConfig(volume, depth)
	initiator.SetNexusConnect(&cfg, f.connect(blocks, depth))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nx, err := initiator.DialNexus(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nx.Close() })
	return nx, f
}
