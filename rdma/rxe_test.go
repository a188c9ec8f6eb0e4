//go:build cgo && linux

package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// The tests below need an RDMA device routing to ISER_RDMA_ADDR (default
// 10.99.0.1, the VM lab's rxe loopback). They skip where there is none,
// unless ISER_RDMA_REQUIRE is set (the VM lab sets it): then they fail.

var testPort atomic.Uint32

func init() { testPort.Store(18515) }

func rdmaAddr(t *testing.T) netip.Addr {
	t.Helper()
	s := os.Getenv("ISER_RDMA_ADDR")
	if s == "" {
		s = "10.99.0.1"
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("ISER_RDMA_ADDR: %v", err)
	}
	l, err := DeviceForAddr(ip)
	if err != nil {
		msg := fmt.Sprintf("no RDMA device for %v: %v (try: modprobe rdma_rxe; ip link add rxe-net0 type dummy; ip addr add %v/24 dev rxe-net0; ip link set rxe-net0 up; iser-attach rdma setup --netdev rxe-net0)", ip, err, ip)
		if os.Getenv("ISER_RDMA_REQUIRE") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if err := Supported(); err != nil {
		t.Fatal(err)
	}
	t.Logf("RDMA device %s port %d on %s (%s)", l.Device, l.Port, l.NetDev, l.State)
	return ip
}

// resourceCounts returns the rdma restrack summary (pd, cq, qp, cm_id, mr,
// ...) summed over all devices.
func resourceCounts(t *testing.T) map[string]uint64 {
	t.Helper()
	res, err := netlink.RdmaResourceList()
	if err != nil {
		t.Fatalf("rdma resource list: %v", err)
	}
	sum := make(map[string]uint64)
	for _, r := range res {
		for k, v := range r.RdmaResourceSummaryEntries {
			sum[k] += v
		}
	}
	return sum
}

// checkLeaks fails the test if it ends with more RDMA resources than it
// started with.
func checkLeaks(t *testing.T) {
	before := resourceCounts(t)
	t.Cleanup(func() {
		var after map[string]uint64
		// cm_ids of the peer may take a moment after the last Close.
		for i := 0; i < 50; i++ {
			after = resourceCounts(t)
			if !leaked(before, after) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("leaked RDMA resources: before %v, after %v", before, after)
	})
}

// leaked compares restrack counts. "ctx" is left out: librdmacm opens one
// device context per device on first use and keeps it for the process
// (40-rdma.sh compares the counts after the process has exited).
func leaked(before, after map[string]uint64) bool {
	for k, v := range after {
		if k != "ctx" && v > before[k] {
			return true
		}
	}
	return false
}

type pair struct {
	client, server *Conn
	listener       *Listener
}

// connect sets up a Listen/Dial pair over the RDMA device and exchanges
// private data both ways.
func connect(t *testing.T, ip netip.Addr, opt DialOptions) pair {
	t.Helper()
	addr := netip.AddrPortFrom(ip, uint16(testPort.Add(1))).String()
	srvOpt := opt
	srvOpt.PrivateData = []byte{0x80, 0, 0, 0, 'r', 'e', 'p'}
	l, err := Listen(addr, srvOpt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx)
		ch <- res{c, err}
	}()
	cliOpt := opt
	cliOpt.PrivateData = []byte{0xc0, 0, 0, 0, 'r', 'e', 'q'}
	client, err := Dial(ctx, addr, cliOpt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	server := r.c
	t.Cleanup(func() { server.Close() })

	if got := client.PeerPrivateData(); !bytes.HasPrefix(got, srvOpt.PrivateData) {
		t.Errorf("client saw private data %x, want prefix %x", got, srvOpt.PrivateData)
	}
	if got := server.PeerPrivateData(); !bytes.HasPrefix(got, cliOpt.PrivateData) {
		t.Errorf("server saw private data %x, want prefix %x", got, cliOpt.PrivateData)
	}
	if client.ResponderResources() <= 0 {
		t.Errorf("client responder resources %d, want > 0", client.ResponderResources())
	}
	if client.Device() == "" || client.Device() != server.Device() {
		t.Errorf("devices %q / %q", client.Device(), server.Device())
	}
	if client.RemoteAddr().String() != addr || server.LocalAddr().String() != addr ||
		server.RemoteAddr() != client.LocalAddr() {
		t.Errorf("addresses: client %v -> %v, server %v <- %v", client.LocalAddr(), client.RemoteAddr(), server.LocalAddr(), server.RemoteAddr())
	}
	return pair{client: client, server: server, listener: l}
}

// pollOne polls until one completion arrives.
func pollOne(t *testing.T, c *Conn) Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]Completion, 1)
	n, err := c.Poll(ctx, out)
	if err != nil || n != 1 {
		t.Fatalf("poll: %d, %v", n, err)
	}
	return out[0]
}

func wantCompletion(t *testing.T, got Completion, id uint64, op Opcode) {
	t.Helper()
	if got.ID != id || got.Op != op || got.Status != WCSuccess {
		t.Fatalf("completion %+v, want ID %#x %v success", got, id, op)
	}
}

func register(t *testing.T, c *Conn, size int) *MemoryRegion {
	t.Helper()
	m, err := c.RegisterMemory(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestSendRecvPingPong(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	p := connect(t, ip, DialOptions{})
	cbuf, sbuf := register(t, p.client, 8192), register(t, p.server, 8192)

	const rounds = 50
	for i := 0; i < rounds; i++ {
		// Server receives the client's two-SGE SEND (76-byte header + data,
		// as iSER lays out a PDU), then answers.
		if err := p.server.PostRecv([]RecvWR{{ID: uint64(1000 + i), SGE: sbuf.SGE(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
		// Two receives for the two-part pong, posted as one batch.
		err := p.client.PostRecv([]RecvWR{
			{ID: uint64(2000 + i), SGE: cbuf.SGE(4096, 2048)},
			{ID: uint64(2500 + i), SGE: cbuf.SGE(6144, 2048)},
		})
		if err != nil {
			t.Fatal(err)
		}
		hdr, data := cbuf.Bytes()[:76], cbuf.Bytes()[512:512+300]
		for j := range hdr {
			hdr[j] = byte(i + j)
		}
		for j := range data {
			data[j] = byte(3*i + j)
		}
		err = p.client.PostSend([]SendWR{{ID: uint64(i), Signaled: true, SGEs: []SGE{cbuf.SGE(0, 76), cbuf.SGE(512, 300)}}})
		if err != nil {
			t.Fatal(err)
		}
		wantCompletion(t, pollOne(t, p.client), uint64(i), OpSend)
		rc := pollOne(t, p.server)
		wantCompletion(t, rc, uint64(1000+i), OpRecv)
		if rc.ByteLen != 376 {
			t.Fatalf("received %d bytes, want 376", rc.ByteLen)
		}
		got := sbuf.Bytes()[:376]
		if !bytes.Equal(got[:76], hdr) || !bytes.Equal(got[76:], data) {
			t.Fatalf("round %d: received data differs", i)
		}
		// Pong, unsignaled followed by signaled (the unsignaled one completes
		// silently).
		copy(sbuf.Bytes()[1000:], "pong")
		err = p.server.PostSend([]SendWR{
			{ID: 77, SGEs: []SGE{sbuf.SGE(1000, 2)}},
			{ID: uint64(3000 + i), Signaled: true, SGEs: []SGE{sbuf.SGE(1002, 2)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantCompletion(t, pollOne(t, p.server), uint64(3000+i), OpSend)
		// Receives complete in the order they were posted.
		for k, want := range []string{"po", "ng"} {
			c := pollOne(t, p.client)
			wantCompletion(t, c, uint64(2000+500*k+i), OpRecv)
			off := 4096 + 2048*k
			if c.ByteLen != 2 || string(cbuf.Bytes()[off:off+2]) != want {
				t.Fatalf("pong %d: %d bytes %q", k, c.ByteLen, cbuf.Bytes()[off:off+2])
			}
		}
	}
}

// The passive side moves data with RDMA WRITE and READ against the
// client's registered memory, as an iSER target does.
func TestRDMAWriteRead(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	p := connect(t, ip, DialOptions{})
	const size = 256 << 10
	cbuf, sbuf := register(t, p.client, size), register(t, p.server, size)
	for i := range sbuf.Bytes() {
		sbuf.Bytes()[i] = byte(i * 7)
	}
	// Target writes 200 KiB into the initiator's buffer (iSER READ command).
	err := p.server.PostSend([]SendWR{{ID: 1, Op: OpRDMAWrite, Signaled: true,
		SGEs: []SGE{sbuf.SGE(0, 100<<10), sbuf.SGE(100<<10, 100<<10)}, RemoteAddr: cbuf.Addr() + 4096, RKey: cbuf.RKey()}})
	if err != nil {
		t.Fatal(err)
	}
	wantCompletion(t, pollOne(t, p.server), 1, OpRDMAWrite)
	if !bytes.Equal(cbuf.Bytes()[4096:4096+200<<10], sbuf.Bytes()[:200<<10]) {
		t.Fatal("RDMA WRITE: data differs")
	}
	// Target reads 128 KiB of write data from the initiator (iSER WRITE).
	for i := range cbuf.Bytes() {
		cbuf.Bytes()[i] = byte(i * 13)
	}
	err = p.server.PostSend([]SendWR{{ID: 2, Op: OpRDMARead, Signaled: true,
		SGEs: []SGE{sbuf.SGE(0, 128<<10)}, RemoteAddr: cbuf.Addr() + 8192, RKey: cbuf.RKey()}})
	if err != nil {
		t.Fatal(err)
	}
	c := pollOne(t, p.server)
	wantCompletion(t, c, 2, OpRDMARead)
	if !bytes.Equal(sbuf.Bytes()[:128<<10], cbuf.Bytes()[8192:8192+128<<10]) {
		t.Fatal("RDMA READ: data differs")
	}
	// A wrong rkey is a remote access error, and the QP goes to error.
	err = p.server.PostSend([]SendWR{{ID: 3, Op: OpRDMAWrite, Signaled: true,
		SGEs: []SGE{sbuf.SGE(0, 64)}, RemoteAddr: cbuf.Addr(), RKey: cbuf.RKey() ^ 0x5a5a00}})
	if err != nil {
		t.Fatal(err)
	}
	if c := pollOne(t, p.server); c.ID != 3 || c.Status == WCSuccess {
		t.Fatalf("write with a bad rkey: %+v", c)
	} else {
		t.Logf("bad rkey: %v", c.Err())
	}
}

// A buffer the caller owns is registered with one connection after
// another (as a Nexus does across reconnects): it stays mapped and keeps
// its data when the first connection closes, and takes RDMA on the next.
func TestRegisterBufferAcrossConnections(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	const size = 64 << 10
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	if _, err := connect(t, ip, DialOptions{}).client.RegisterBuffer(mem[1:]); err == nil {
		t.Fatal("RegisterBuffer took memory that is not page-aligned")
	}
	for round := 0; round < 2; round++ {
		p := connect(t, ip, DialOptions{})
		m, err := p.client.RegisterBuffer(mem)
		if err != nil {
			t.Fatal(err)
		}
		sbuf := register(t, p.server, size)
		for i := range sbuf.Bytes() {
			sbuf.Bytes()[i] = byte(i*3 + round)
		}
		err = p.server.PostSend([]SendWR{{ID: 1, Op: OpRDMAWrite, Signaled: true,
			SGEs: []SGE{sbuf.SGE(0, size)}, RemoteAddr: m.Addr(), RKey: m.RKey()}})
		if err != nil {
			t.Fatal(err)
		}
		wantCompletion(t, pollOne(t, p.server), 1, OpRDMAWrite)
		want := append([]byte(nil), sbuf.Bytes()...)
		p.client.Close() // deregisters m, must not unmap mem
		if !bytes.Equal(mem, want) {
			t.Fatalf("round %d: RDMA WRITE into the registered buffer: data differs", round)
		}
		mem[0] ^= 0xff // still mapped and writable
	}
}

func TestCloseUnblocksPoll(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	p := connect(t, ip, DialOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := p.client.Poll(context.Background(), make([]Completion, 4))
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Poll returned before Close: %v", err)
	default:
	}
	if err := p.client.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Poll after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Poll")
	}
	if err := p.client.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := p.client.PostSend([]SendWR{{ID: 1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("PostSend after Close: %v", err)
	}
	// The peer sees the disconnect: Poll ends with ErrDisconnected.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.server.Poll(ctx, make([]Completion, 4)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("server Poll after client Close: %v, want ErrDisconnected", err)
	}
}

func TestPollContext(t *testing.T) {
	ip := rdmaAddr(t)
	p := connect(t, ip, DialOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.client.Poll(ctx, make([]Completion, 4))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Poll took %v to notice its context", d)
	}
}

// After the peer disconnects, every posted receive completes with a flush
// error before Poll reports ErrDisconnected.
func TestDisconnectFlushesReceives(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	p := connect(t, ip, DialOptions{RecvDepth: 16})
	buf := register(t, p.client, 16*1024)
	var wrs []RecvWR
	for i := 0; i < 16; i++ {
		wrs = append(wrs, RecvWR{ID: uint64(100 + i), SGE: buf.SGE(i*1024, 1024)})
	}
	if err := p.client.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
	if err := p.server.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if err := p.server.Disconnect(); err != nil {
		t.Fatalf("second Disconnect: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[uint64]bool{}
	out := make([]Completion, 5)
	for {
		n, err := p.client.Poll(ctx, out)
		if errors.Is(err, ErrDisconnected) {
			break
		}
		if err != nil {
			t.Fatalf("poll after %d flushed: %v", len(seen), err)
		}
		for _, c := range out[:n] {
			if c.Op != OpRecv || c.Status != WCWRFlushErr || c.ID < 100 || c.ID >= 116 || seen[c.ID] {
				t.Fatalf("unexpected completion %+v", c)
			}
			seen[c.ID] = true
		}
	}
	if len(seen) != 16 {
		t.Fatalf("%d receives flushed, want 16", len(seen))
	}
	// The server's own side drains too.
	if _, err := p.server.Poll(ctx, out); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("server Poll after Disconnect: %v", err)
	}
}

func TestReject(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	addr := netip.AddrPortFrom(ip, uint16(testPort.Add(1))).String()
	l, err := Listen(addr, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		req, err := l.AcceptRequest(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if !bytes.HasPrefix(req.PrivateData(), []byte("knock")) {
			t.Errorf("request private data %q", req.PrivateData())
		}
		if err := req.Reject([]byte("go away")); err != nil {
			t.Error(err)
		}
	}()
	c, err := Dial(ctx, addr, DialOptions{PrivateData: []byte("knock")})
	var rej *RejectError
	if !errors.As(err, &rej) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial: %v, want *RejectError", err)
	}
	if !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Errorf("reject private data %q", rej.PrivateData)
	}
	t.Logf("rejected: %v", err)
}

func TestDialNobodyListening(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := netip.AddrPortFrom(ip, 1).String()
	c, err := Dial(ctx, addr, DialOptions{})
	if err == nil {
		c.Close()
		t.Fatal("Dial to a port nobody listens on succeeded")
	}
	t.Logf("dial %s: %v", addr, err)
	var rej *RejectError
	var cme *CMEventError
	if !errors.As(err, &rej) && !errors.As(err, &cme) {
		t.Errorf("want *RejectError or *CMEventError, got %T", errors.Unwrap(err))
	}
}

func TestListenerCloseUnblocksAccept(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	l, err := Listen(netip.AddrPortFrom(ip, uint16(testPort.Add(1))).String(), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept(context.Background())
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Accept")
	}
}

// Soft-RoCE on a fresh dummy netdev, as `iser-attach rdma setup` does it.
func TestAddSoftRoCE(t *testing.T) {
	rdmaAddr(t)
	const netdev, name = "rdmatest0", "rxetest0"
	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: netdev}}
	if err := netlink.LinkAdd(dummy); err != nil {
		t.Fatalf("add dummy netdev: %v", err)
	}
	defer netlink.LinkDel(dummy)
	ip := netip.MustParseAddr("10.98.0.1")
	addr, _ := netlink.ParseAddr(ip.String() + "/24")
	if err := netlink.AddrAdd(dummy, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(dummy); err != nil {
		t.Fatal(err)
	}
	if err := AddSoftRoCE(name, netdev); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := DeleteLink(name); err != nil {
			t.Error(err)
		}
	}()
	if err := AddSoftRoCE(name, netdev); err != nil {
		t.Fatalf("second AddSoftRoCE: %v", err)
	}
	if err := AddSoftRoCE(name, "lo"); err == nil {
		t.Fatal("AddSoftRoCE of an existing name on another netdev succeeded")
	}
	var l Link
	var err error
	for i := 0; i < 50; i++ {
		if l, err = DeviceForAddr(ip); err == nil && l.State == "ACTIVE" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || l.Device != name || l.NetDev != netdev || l.State != "ACTIVE" || l.NodeGUID == "" {
		t.Fatalf("DeviceForAddr(%v) = %+v, %v", ip, l, err)
	}
	if _, err := DeviceForAddr(netip.MustParseAddr("127.0.0.1")); !errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceForAddr(127.0.0.1): %v, want ErrNoDevice", err)
	}
}
