//go:build cgo

package rdma

/*
#include <errno.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// pollBatch bounds the completions one Poll takes in one cgo call.
const pollBatch = 64

// Conn is one RDMA reliable connection (an RC queue pair with its own
// protection domain, a send and a receive completion queue sharing one
// completion channel, and its own CM event channel).
//
// Concurrency: PostSend (with its RDMA READ/WRITE requests) may run in one
// goroutine while PostRecv runs in another and Poll in a third; each of the
// three is serialized internally, so extra callers wait rather than corrupt
// state. RegisterMemory, Disconnect and Close are safe from any goroutine.
// Close unblocks a Poll waiting in another goroutine (it returns ErrClosed).
//
// Teardown order (Close): mark closed and wake Poll; wait for Poll and
// in-flight posts to return; rdma_disconnect and move the QP to the error
// state; post a marker on the send queue and wait (bounded) until it and
// every outstanding receive completed with a flush error; destroy the QP
// (no DMA into registered memory after this point); deregister and unmap
// every MemoryRegion still open; destroy the CQs, the completion channel,
// the PD, the CM id and its event channel.
type Conn struct {
	opt DialOptions

	ch     *C.struct_rdma_event_channel
	id     *C.struct_rdma_cm_id
	pd     *C.struct_ibv_pd
	compCh *C.struct_ibv_comp_channel
	cq     *C.struct_ibv_cq // one CQ for the send and receive queues
	w      *waiter

	// C scratch memory for one batch of posts and one poll.
	sendReqs *C.struct_rd_send
	sendSGEs *C.struct_ibv_sge
	sendWRs  *C.struct_ibv_send_wr
	sendBad  *C.int
	recvIDs  *C.uint64_t
	recvSGEs *C.struct_ibv_sge
	recvWRs  *C.struct_ibv_recv_wr
	recvBad  *C.int
	wcs      *C.struct_rd_wc
	sendCap  int // requests per send batch
	recvCap  int // requests per receive batch

	device         string
	local, remote  netip.AddrPort
	peerPrivate    []byte
	responderRes   int
	initiatorDepth int
	maxQPRdAtom    int
	maxQPInitRd    int

	sendMu sync.Mutex   // send scratch, drain marker
	recvMu sync.Mutex   // receive scratch
	postMu sync.RWMutex // shared by posts and MR calls, exclusive for teardown
	pollMu sync.Mutex   // Poll, and teardown once Poll is out
	// pollFd is PollFd: the waiter's epoll descriptor, 0 before it
	// exists and -1 once closed (read without pollMu).
	pollFd atomic.Int32

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	stateMu      sync.Mutex
	connected    bool // ESTABLISHED seen
	disconnected bool // rdma_disconnect done (by us or in answer to the peer)
	markerPosted bool // drain marker on the send queue
	markerSeen   atomic.Bool
	recvPending  atomic.Int64 // receives posted and not yet completed
	armed        bool         // CQs armed since the last completion event (Poll only)

	mrMu sync.Mutex
	mrs  map[*MemoryRegion]struct{}
}

// Dial connects to an RDMA CM listener at addr ("host:port", e.g. an iSER
// portal "10.99.0.1:3260"): it resolves the address and the route (1000 ms
// each), creates the queue pair on the device that routes there, and sends
// a connect request carrying opt.PrivateData. It returns once the connection
// is established, or with a *RejectError, a *CMEventError or ctx's error.
func Dial(ctx context.Context, addr string, opt DialOptions) (*Conn, error) {
	c, err := dial(ctx, addr, opt)
	if err != nil {
		return nil, fmt.Errorf("rdma dial %s: %w", addr, err)
	}
	return c, nil
}

func dial(ctx context.Context, addr string, opt DialOptions) (*Conn, error) {
	if err := load(); err != nil {
		return nil, err
	}
	opt = opt.withDefaults()
	if err := opt.validate(maxReqPrivateData); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	dst, err := resolveAddrPort(ctx, addr)
	if err != nil {
		return nil, err
	}
	var src netip.AddrPort
	if opt.SourceAddr != "" {
		if src, err = parseSource(opt.SourceAddr); err != nil {
			return nil, err
		}
	}
	c := &Conn{opt: opt}
	ok := false
	defer func() {
		if !ok {
			c.release(false)
		}
	}()
	if err := c.openChannel(); err != nil {
		return nil, err
	}
	var err2 error
	if c.id, err2 = C.rd_create_id(c.ch); c.id == nil {
		return nil, fmt.Errorf("rdma_create_id: %w", ptrErr(err2))
	}
	dstIP, srcIP := cAddr(dst.Addr()), cAddr(src.Addr())
	defer C.free(dstIP.p)
	defer C.free(srcIP.p)
	r := C.rd_resolve_addr(c.id, (*C.uint8_t)(srcIP.p), srcIP.n, C.uint16_t(src.Port()),
		(*C.uint8_t)(dstIP.p), dstIP.n, C.uint16_t(dst.Port()), C.int(ResolveTimeout.Milliseconds()))
	if r != 0 {
		return nil, fmt.Errorf("rdma_resolve_addr: %w", errnoErr(int(r)))
	}
	if _, err := c.waitEvent(ctx, CMEventAddrResolved); err != nil {
		return nil, fmt.Errorf("resolve address: %w", err)
	}
	if r := C.rd_resolve_route(c.id, C.int(ResolveTimeout.Milliseconds())); r != 0 {
		return nil, fmt.Errorf("rdma_resolve_route: %w", errnoErr(int(r)))
	}
	if _, err := c.waitEvent(ctx, CMEventRouteResolved); err != nil {
		return nil, fmt.Errorf("resolve route: %w", err)
	}
	if err := c.setupQP(); err != nil {
		return nil, err
	}
	c.responderRes = opt.ResponderResources
	if c.responderRes == 0 {
		c.responderRes = min(255, c.maxQPRdAtom)
	}
	c.responderRes = min(c.responderRes, c.maxQPRdAtom)
	if c.responderRes <= 0 {
		return nil, fmt.Errorf("device %s: max_qp_rd_atom is %d: the peer could not RDMA READ", c.device, c.maxQPRdAtom)
	}
	c.initiatorDepth = opt.InitiatorDepth
	if c.initiatorDepth == 0 {
		c.initiatorDepth = DefaultInitiatorDepth
	}
	c.initiatorDepth = min(c.initiatorDepth, c.maxQPInitRd)
	pd, pdLen := cBytes(opt.PrivateData)
	defer C.free(pd)
	r = C.rd_connect(c.id, pd, pdLen, C.int(c.responderRes), C.int(c.initiatorDepth), retryCount, rnrRetryCount)
	if r != 0 {
		return nil, fmt.Errorf("rdma_connect: %w", errnoErr(int(r)))
	}
	ev, err := c.waitEvent(ctx, CMEventEstablished)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	c.established(ev)
	ok = true
	return c, nil
}

// openChannel creates the connection's CM event channel and waiter.
func (c *Conn) openChannel() error {
	w, err := newWaiter()
	if err != nil {
		return err
	}
	c.w = w
	c.pollFd.Store(int32(w.epfd))
	var err2 error
	if c.ch, err2 = C.rd_create_channel(); c.ch == nil {
		return fmt.Errorf("rdma_create_event_channel: %w", ptrErr(err2))
	}
	return c.w.add(int(c.ch.fd), tagCM)
}

// setupQP creates the PD, the completion channel, both CQs, the RC QP and
// the scratch memory on the device the CM id is bound to.
func (c *Conn) setupQP() error {
	c.device = C.GoString(C.rd_device_name(c.id))
	a := C.rd_query_device(c.id)
	if a.err != 0 {
		return fmt.Errorf("ibv_query_device %s: %w", c.device, errnoErr(int(a.err)))
	}
	c.maxQPRdAtom, c.maxQPInitRd = int(a.max_qp_rd_atom), int(a.max_qp_init_rd_atom)
	maxWR, maxSGE := a.max_qp_wr, a.max_sge
	o := c.opt
	// One extra send slot for the drain marker.
	if o.SendDepth+1 > int(maxWR) || o.RecvDepth > int(maxWR) {
		return fmt.Errorf("device %s: queue depth %d/%d exceeds max_qp_wr %d", c.device, o.SendDepth, o.RecvDepth, int(maxWR)-1)
	}
	if o.MaxSendSGE > int(maxSGE) || o.MaxRecvSGE > int(maxSGE) {
		return fmt.Errorf("device %s: SGE count %d/%d exceeds max_sge %d", c.device, o.MaxSendSGE, o.MaxRecvSGE, int(maxSGE))
	}
	var err error
	if c.pd, err = C.rd_alloc_pd(c.id); c.pd == nil {
		return fmt.Errorf("ibv_alloc_pd: %w", ptrErr(err))
	}
	if c.compCh, err = C.rd_create_comp_channel(c.id); c.compCh == nil {
		return fmt.Errorf("ibv_create_comp_channel: %w", ptrErr(err))
	}
	if err := c.w.add(int(c.compCh.fd), tagComp); err != nil {
		return err
	}
	// One CQ for both queues: one arm, one event and one poll per
	// wake-up, and completions in the order they happened.
	if c.cq, err = C.rd_create_cq(c.id, C.int(o.SendDepth+1+o.RecvDepth), c.compCh); c.cq == nil {
		return fmt.Errorf("ibv_create_cq: %w", ptrErr(err))
	}
	if r := C.rd_create_qp(c.id, c.pd, c.cq, c.cq, C.int(o.SendDepth+1), C.int(o.RecvDepth),
		C.int(o.MaxSendSGE), C.int(o.MaxRecvSGE)); r != 0 {
		return fmt.Errorf("rdma_create_qp: %w", errnoErr(int(r)))
	}
	c.sendCap, c.recvCap = o.SendDepth+1, o.RecvDepth
	c.sendReqs = (*C.struct_rd_send)(calloc(c.sendCap, C.sizeof_struct_rd_send))
	c.sendSGEs = (*C.struct_ibv_sge)(calloc(c.sendCap*o.MaxSendSGE, C.sizeof_struct_ibv_sge))
	c.sendWRs = (*C.struct_ibv_send_wr)(calloc(c.sendCap, C.sizeof_struct_ibv_send_wr))
	c.sendBad = (*C.int)(calloc(1, C.sizeof_int))
	c.recvIDs = (*C.uint64_t)(calloc(c.recvCap, 8))
	c.recvSGEs = (*C.struct_ibv_sge)(calloc(c.recvCap, C.sizeof_struct_ibv_sge))
	c.recvWRs = (*C.struct_ibv_recv_wr)(calloc(c.recvCap, C.sizeof_struct_ibv_recv_wr))
	c.recvBad = (*C.int)(calloc(1, C.sizeof_int))
	c.wcs = (*C.struct_rd_wc)(calloc(pollBatch, C.sizeof_struct_rd_wc))
	c.mrs = make(map[*MemoryRegion]struct{})
	return nil
}

// established records what the ESTABLISHED event (or, on the passive
// side, the connect request) told about the connection.
func (c *Conn) established(ev *C.struct_rd_event) {
	if c.peerPrivate == nil {
		c.peerPrivate = eventPrivateData(ev)
	}
	c.local = cmAddr(c.id, 0)
	c.remote = cmAddr(c.id, 1)
	c.stateMu.Lock()
	c.connected = true
	c.stateMu.Unlock()
}

// waitEvent reads CM events until one of type want arrives. Events that
// end the wait otherwise become a *RejectError or a *CMEventError.
func (c *Conn) waitEvent(ctx context.Context, want CMEvent) (*C.struct_rd_event, error) {
	return waitCMEvent(ctx, c.ch, c.w, &c.closed, want)
}

func waitCMEvent(ctx context.Context, ch *C.struct_rdma_event_channel, w *waiter, closed *atomic.Bool, want CMEvent) (*C.struct_rd_event, error) {
	ev := (*C.struct_rd_event)(calloc(1, C.sizeof_struct_rd_event))
	defer C.free(unsafe.Pointer(ev))
	for {
		r := C.rd_get_event(ch, ev)
		if r == -C.EAGAIN {
			if closed.Load() {
				return nil, ErrClosed
			}
			if _, err := w.wait(ctx); err != nil {
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue
		}
		if r != 0 {
			return nil, fmt.Errorf("rdma_get_cm_event: %w", errnoErr(int(r)))
		}
		got := CMEvent(ev._type)
		switch {
		case got == want:
			out := *ev
			return &out, nil
		case got == CMEventRejected:
			return nil, &RejectError{Reason: int(ev.status), PrivateData: eventPrivateData(ev)}
		case got == CMEventTimewaitExit || got == CMEventAddrChange:
			continue
		default:
			return nil, &CMEventError{Event: got, Status: int(ev.status)}
		}
	}
}

func eventPrivateData(ev *C.struct_rd_event) []byte {
	n := int(ev.private_data_len)
	if n == 0 {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(&ev.private_data[0]), C.int(n))
}

// PeerPrivateData returns the private data the peer sent with its accept
// (Dial) or its connect request (Accept). On InfiniBand and RoCE the CM
// carries fixed-size private data, so the slice is zero-padded to 196 bytes
// (accept) or 56 bytes (request); a protocol reads its own header from the
// front (iSER: 4 bytes).
func (c *Conn) PeerPrivateData() []byte { return c.peerPrivate }

// Device returns the RDMA device name the connection runs on ("rxe0").
func (c *Conn) Device() string { return c.device }

// LocalAddr returns the connection's local IP address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr returns the peer's IP address and port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// ResponderResources returns the RDMA READs the peer may have outstanding
// against this side, as sent in the connect request or accept.
func (c *Conn) ResponderResources() int { return c.responderRes }

// InitiatorDepth returns the RDMA READs this side may have outstanding.
func (c *Conn) InitiatorDepth() int { return c.initiatorDepth }

type cbuf struct {
	p unsafe.Pointer
	n C.int
}

// cAddr copies an IP address into C memory (nil for the zero Addr).
func cAddr(a netip.Addr) cbuf {
	if !a.IsValid() {
		return cbuf{}
	}
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		return cbuf{C.CBytes(b[:]), 4}
	}
	b := a.As16()
	return cbuf{C.CBytes(b[:]), 16}
}

// cBytes copies b into C memory; C.free(nil) is fine for empty b.
func cBytes(b []byte) (unsafe.Pointer, C.int) {
	if len(b) == 0 {
		return nil, 0
	}
	return C.CBytes(b), C.int(len(b))
}

func calloc(n, size int) unsafe.Pointer {
	if n == 0 {
		n = 1
	}
	p := C.calloc(C.size_t(n), C.size_t(size))
	if p == nil {
		panic("rdma: out of C memory")
	}
	return p
}

func cmAddr(id *C.struct_rdma_cm_id, peer int) netip.AddrPort {
	sa := C.rd_addr(id, C.int(peer))
	var b [16]byte
	for i := range b {
		b[i] = byte(sa.ip[i])
	}
	switch sa.family {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), uint16(sa.port))
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(b), uint16(sa.port))
	}
	return netip.AddrPort{}
}

// ptrErr is the errno a shim function returning NULL left behind.
func ptrErr(err error) error {
	if err == nil {
		return syscall.EIO
	}
	return err
}

// resolveAddrPort turns "host:port" into an address, looking host up if
// it is not a literal IP.
func resolveAddrPort(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("parse address: %w", err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("parse port %q: %w", portStr, err)
	}
	if host == "" {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil {
			return netip.AddrPort{}, fmt.Errorf("look up %s: %w", host, lerr)
		}
		if len(ips) == 0 {
			return netip.AddrPort{}, fmt.Errorf("look up %s: no address", host)
		}
		ip = ips[0]
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}

// parseSource accepts "ip" or "ip:port".
func parseSource(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("parse source address %q: %w", s, err)
	}
	return netip.AddrPortFrom(ip.Unmap(), 0), nil
}

var errReservedID = errors.New("work request ID ^uint64(0) is reserved")

var errRecvID = fmt.Errorf("receive work request IDs must be below %#x", uint64(recvIDBit-1))
