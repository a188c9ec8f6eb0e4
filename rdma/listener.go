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
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
)

const listenBacklog = 16

// Listener is the passive side of the RDMA CM: it listens on an address
// and accepts connections, each a Conn with its own event channel.
//
// Concurrency: Accept and AcceptRequest are serialized; Close is safe from
// any goroutine, is idempotent, and unblocks a waiting Accept (ErrClosed).
type Listener struct {
	opt  DialOptions
	ch   *C.struct_rdma_event_channel
	id   *C.struct_rdma_cm_id
	w    *waiter
	addr netip.AddrPort

	acceptMu  sync.Mutex
	closed    atomic.Bool
	closeOnce sync.Once
}

// ConnRequest is a connect request a Listener received. Exactly one of
// Accept and Reject must be called.
type ConnRequest struct {
	l           *Listener
	c           *Conn // owns the CM id, migrated to its own event channel
	privateData []byte
	// The peer's offer: RDMA READs it may issue and accepts.
	peerInitiatorDepth, peerResponderRes int
	done                                 bool
}

// Listen binds addr ("ip:port", or ":port" for every address) and listens
// for connect requests. opt sizes the accepted connections' queues and
// opt.PrivateData (at most 196 bytes) goes with every accept Accept sends.
func Listen(addr string, opt DialOptions) (*Listener, error) {
	l, err := listen(addr, opt)
	if err != nil {
		return nil, fmt.Errorf("rdma listen %s: %w", addr, err)
	}
	return l, nil
}

func listen(addr string, opt DialOptions) (*Listener, error) {
	if err := load(); err != nil {
		return nil, err
	}
	opt = opt.withDefaults()
	if err := opt.validate(maxRepPrivateData); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	ap, err := resolveAddrPort(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{opt: opt}
	ok := false
	defer func() {
		if !ok {
			l.release()
		}
	}()
	if l.w, err = newWaiter(); err != nil {
		return nil, err
	}
	var cerr error
	if l.ch, cerr = C.rd_create_channel(); l.ch == nil {
		return nil, fmt.Errorf("rdma_create_event_channel: %w", ptrErr(cerr))
	}
	if err := l.w.add(int(l.ch.fd), tagCM); err != nil {
		return nil, err
	}
	if l.id, cerr = C.rd_create_id(l.ch); l.id == nil {
		return nil, fmt.Errorf("rdma_create_id: %w", ptrErr(cerr))
	}
	ip := cAddr(ap.Addr())
	defer C.free(ip.p)
	if r := C.rd_bind_listen(l.id, (*C.uint8_t)(ip.p), ip.n, C.uint16_t(ap.Port()), listenBacklog); r != 0 {
		return nil, fmt.Errorf("rdma_bind_addr/rdma_listen: %w", errnoErr(int(r)))
	}
	l.addr = cmAddr(l.id, 0)
	ok = true
	return l, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept waits for a connect request and accepts it with the private data
// given to Listen.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	req, err := l.AcceptRequest(ctx)
	if err != nil {
		return nil, err
	}
	return req.Accept(ctx, l.opt.PrivateData)
}

// AcceptRequest waits for the next connect request, so that the caller
// can look at its private data before it accepts or rejects it.
func (l *Listener) AcceptRequest(ctx context.Context) (*ConnRequest, error) {
	l.acceptMu.Lock()
	defer l.acceptMu.Unlock()
	if l.closed.Load() {
		return nil, fmt.Errorf("rdma accept: %w", ErrClosed)
	}
	for {
		ev, err := waitCMEvent(ctx, l.ch, l.w, &l.closed, CMEventConnectRequest)
		if err != nil {
			if _, ok := err.(*CMEventError); ok {
				// Events of connections that died before Accept saw
				// them; keep listening.
				continue
			}
			return nil, fmt.Errorf("rdma accept: %w", err)
		}
		req, err := l.newRequest(ev)
		if err != nil {
			return nil, fmt.Errorf("rdma accept: %w", err)
		}
		return req, nil
	}
}

// newRequest moves the new CM id to its own event channel.
func (l *Listener) newRequest(ev *C.struct_rd_event) (*ConnRequest, error) {
	c := &Conn{opt: l.opt, id: ev.id}
	if err := c.openChannel(); err != nil {
		C.rd_reject(c.id, nil, 0)
		c.release(false)
		return nil, err
	}
	if r := C.rd_migrate_id(c.id, c.ch); r != 0 {
		C.rd_reject(c.id, nil, 0)
		c.release(false)
		return nil, fmt.Errorf("rdma_migrate_id: %w", errnoErr(int(r)))
	}
	return &ConnRequest{
		l:                  l,
		c:                  c,
		privateData:        eventPrivateData(ev),
		peerInitiatorDepth: int(ev.initiator_depth),
		peerResponderRes:   int(ev.responder_resources),
	}, nil
}

// PrivateData returns the private data of the connect request (zero-padded
// to 56 bytes on InfiniBand and RoCE).
func (r *ConnRequest) PrivateData() []byte { return r.privateData }

// Accept creates the queue pair, accepts the request with privateData (at
// most 196 bytes) and waits until the connection is established.
func (r *ConnRequest) Accept(ctx context.Context, privateData []byte) (*Conn, error) {
	c, err := r.accept(ctx, privateData)
	if err != nil {
		return nil, fmt.Errorf("rdma accept: %w", err)
	}
	return c, nil
}

func (r *ConnRequest) accept(ctx context.Context, privateData []byte) (*Conn, error) {
	if r.done {
		return nil, fmt.Errorf("connect request already answered")
	}
	r.done = true
	c := r.c
	if len(privateData) > maxRepPrivateData {
		C.rd_reject(c.id, nil, 0)
		c.release(false)
		return nil, fmt.Errorf("private data of %d bytes exceeds %d", len(privateData), maxRepPrivateData)
	}
	ok := false
	defer func() {
		if !ok {
			c.release(false)
		}
	}()
	if err := c.setupQP(); err != nil {
		C.rd_reject(c.id, nil, 0)
		return nil, err
	}
	// Never more than the peer offered: our RDMA READs against its
	// responder resources, its RDMA READs against our initiator depth.
	c.initiatorDepth = c.opt.InitiatorDepth
	if c.initiatorDepth == 0 {
		c.initiatorDepth = c.maxQPInitRd
	}
	c.initiatorDepth = min(c.initiatorDepth, c.maxQPInitRd, r.peerResponderRes)
	c.responderRes = c.opt.ResponderResources
	if c.responderRes == 0 {
		c.responderRes = min(255, c.maxQPRdAtom)
	}
	c.responderRes = min(c.responderRes, c.maxQPRdAtom, r.peerInitiatorDepth)
	c.peerPrivate = r.privateData
	pd, pdLen := cBytes(privateData)
	defer C.free(pd)
	if rc := C.rd_accept(c.id, pd, pdLen, C.int(c.responderRes), C.int(c.initiatorDepth), rnrRetryCount); rc != 0 {
		return nil, fmt.Errorf("rdma_accept: %w", errnoErr(int(rc)))
	}
	ev, err := c.waitEvent(ctx, CMEventEstablished)
	if err != nil {
		return nil, fmt.Errorf("wait for established: %w", err)
	}
	c.established(ev)
	ok = true
	return c, nil
}

// Reject refuses the request, sending privateData (at most 148 bytes); the
// peer's Dial fails with a *RejectError carrying it.
func (r *ConnRequest) Reject(privateData []byte) error {
	if r.done {
		return fmt.Errorf("rdma reject: connect request already answered")
	}
	r.done = true
	if len(privateData) > maxRejPrivateData {
		privateData = privateData[:maxRejPrivateData]
	}
	pd, pdLen := cBytes(privateData)
	defer C.free(pd)
	var err error
	if rc := C.rd_reject(r.c.id, pd, pdLen); rc != 0 {
		err = fmt.Errorf("rdma reject: rdma_reject: %w", errnoErr(int(rc)))
	}
	r.c.release(false)
	return err
}

// Close stops listening. Connections already accepted stay up.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.w.wake()
		l.acceptMu.Lock()
		defer l.acceptMu.Unlock()
		if e := l.release(); e != nil {
			err = fmt.Errorf("rdma listener close: %w", e)
		}
	})
	return err
}

func (l *Listener) release() error {
	var err error
	if l.id != nil {
		if r := C.rd_destroy_id(l.id); r != 0 {
			err = fmt.Errorf("rdma_destroy_id: %w", errnoErr(int(r)))
		}
		l.id = nil
	}
	if l.ch != nil {
		C.rd_destroy_channel(l.ch)
		l.ch = nil
	}
	if l.w != nil {
		l.w.close()
		l.w = nil
	}
	return err
}
