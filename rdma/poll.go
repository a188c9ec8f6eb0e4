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
	"unsafe"
)

// Poll fills out with completions from both queues, taking up to 64 in one
// cgo call. It blocks until at least one completion is available, ctx is
// done (ctx.Err()), the connection is disconnected and every work request
// posted before has completed (ErrDisconnected), or Close is called
// (ErrClosed). After a disconnect, outstanding work requests complete with
// WCWRFlushErr before Poll reports ErrDisconnected.
func (c *Conn) Poll(ctx context.Context, out []Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	for {
		if c.closed.Load() {
			return 0, fmt.Errorf("rdma poll: %w", ErrClosed)
		}
		n, err := c.pollCQ(out)
		if err != nil {
			return 0, fmt.Errorf("rdma poll: %w", err)
		}
		if n > 0 {
			return n, nil
		}
		if c.drained() {
			return 0, fmt.Errorf("rdma poll: %w", ErrDisconnected)
		}
		if !c.armed {
			if r := C.rd_arm(c.cq); r != 0 {
				return 0, fmt.Errorf("rdma poll: ibv_req_notify_cq: %w", errnoErr(int(r)))
			}
			c.armed = true
			continue // a completion may have arrived before arming
		}
		tags, err := c.w.wait(ctx)
		if err != nil {
			return 0, fmt.Errorf("rdma poll: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("rdma poll: %w", err)
		}
		if err := c.handleReady(tags); err != nil {
			return 0, fmt.Errorf("rdma poll: %w", err)
		}
	}
}

// handleReady consumes completion and CM events the waiter reported.
func (c *Conn) handleReady(tags uint32) error {
	if tags&tagComp != 0 {
		r := C.rd_get_cq_event(c.compCh)
		if r < 0 && r != -C.EAGAIN {
			return fmt.Errorf("ibv_get_cq_event: %w", errnoErr(int(r)))
		}
		if r > 0 {
			c.armed = false
		}
	}
	if tags&tagCM != 0 {
		return c.handleCMEvents()
	}
	return nil
}

// handleCMEvents reads pending CM events on an established connection; a
// disconnect or device removal starts the disconnect and drain.
func (c *Conn) handleCMEvents() error {
	ev := (*C.struct_rd_event)(calloc(1, C.sizeof_struct_rd_event))
	defer C.free(unsafe.Pointer(ev))
	for {
		r := C.rd_get_event(c.ch, ev)
		if r == -C.EAGAIN {
			return nil
		}
		if r != 0 {
			return fmt.Errorf("rdma_get_cm_event: %w", errnoErr(int(r)))
		}
		switch CMEvent(ev._type) {
		case CMEventDisconnected, CMEventDeviceRemoval:
			c.startDisconnect()
		}
	}
}

// pollCQ takes completions from the CQ with one cgo call, dropping the
// drain marker and counting receives.
func (c *Conn) pollCQ(out []Completion) (int, error) {
	c.stateMu.Lock()
	if c.disconnected && !c.markerPosted {
		c.postMarker()
	}
	c.stateMu.Unlock()
	n := min(len(out), pollBatch)
	got := C.rd_poll(c.cq, c.wcs, C.int(n))
	if got < 0 {
		return 0, fmt.Errorf("ibv_poll_cq: %w", errnoErr(int(got)))
	}
	k := 0
	for _, wc := range unsafe.Slice(c.wcs, int(got)) {
		id := uint64(wc.id)
		recv := id != drainID && id&recvIDBit != 0
		if recv {
			c.recvPending.Add(-1)
		} else if id == drainID {
			c.markerSeen.Store(true)
			continue
		}
		out[k] = toCompletion(&wc, recv)
		k++
	}
	return k, nil
}

func toCompletion(wc *C.struct_rd_wc, recv bool) Completion {
	cp := Completion{
		ID:              uint64(wc.id) &^ recvIDBit,
		Status:          WCStatus(wc.status),
		ByteLen:         uint32(wc.byte_len),
		InvalidatedRKey: uint32(wc.invalidated_rkey),
		HasInvalidate:   wc.wc_flags&C.IBV_WC_WITH_INV != 0,
		VendorErr:       uint32(wc.vendor_err),
	}
	switch {
	case recv:
		cp.Op = OpRecv
	case wc.status != C.IBV_WC_SUCCESS:
		cp.Op = OpSend
	case wc.opcode == C.IBV_WC_RDMA_WRITE:
		cp.Op = OpRDMAWrite
	case wc.opcode == C.IBV_WC_RDMA_READ:
		cp.Op = OpRDMARead
	default:
		cp.Op = OpSend
	}
	return cp
}

// drained reports whether the connection is disconnected and every work
// request has completed.
func (c *Conn) drained() bool {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.disconnected && c.markerSeen.Load() && c.recvPending.Load() <= 0
}

// PollFd is a descriptor that becomes readable when Poll would not block:
// a completion or CM event waits, or Close or a watched context's end
// woke the connection. A loop that reaps the completions itself watches
// it (in its own epoll set or io_uring) and calls TryPoll. It stays open
// until Close, and is -1 after.
func (c *Conn) PollFd() int {
	if fd := c.pollFd.Load(); fd > 0 {
		return int(fd)
	}
	return -1
}

// TryPoll is Poll without blocking: it handles the completion and CM
// events PollFd reports, then takes what completions wait (up to 64),
// and returns 0 when none does. When it returns fewer than len(out) the
// CQ was empty after them and is armed: a later completion makes PollFd
// readable, so a caller may stop there. Its errors are Poll's. Poll and
// TryPoll exclude each other; a Poll blocked in its wait holds TryPoll
// off until it returns (have its context end first).
func (c *Conn) TryPoll(out []Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.closed.Load() {
		return 0, fmt.Errorf("rdma poll: %w", ErrClosed)
	}
	// Mostly PollFd fired for a completion event: read it straight away.
	// Only when there is none does one epoll_wait say what else is
	// ready (CM events; a wake meant for a Poll nobody is in, dropped so
	// that PollFd does not stay readable). Whatever is left when both
	// are ready keeps PollFd readable for the next call.
	switch r := C.rd_get_cq_event(c.compCh); {
	case r > 0:
		c.armed = false
	case r == -C.EAGAIN:
		tags, err := c.w.ready()
		if err != nil {
			return 0, fmt.Errorf("rdma poll: %w", err)
		}
		if err := c.handleReady(tags); err != nil {
			return 0, fmt.Errorf("rdma poll: %w", err)
		}
	default:
		return 0, fmt.Errorf("rdma poll: ibv_get_cq_event: %w", errnoErr(int(r)))
	}
	k := 0
	for {
		n, err := c.pollCQ(out[k:])
		if err != nil {
			return 0, fmt.Errorf("rdma poll: %w", err)
		}
		k += n
		if k == len(out) || k > 0 && c.armed {
			return k, nil
		}
		if k == 0 && c.drained() {
			return 0, fmt.Errorf("rdma poll: %w", ErrDisconnected)
		}
		if c.armed {
			return k, nil // 0: nothing came since it was armed
		}
		if r := C.rd_arm(c.cq); r != 0 {
			return 0, fmt.Errorf("rdma poll: ibv_req_notify_cq: %w", errnoErr(int(r)))
		}
		c.armed = true // and look once more: a completion may have come before arming
	}
}
