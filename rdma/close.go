//go:build cgo

package rdma

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// drainTimeout bounds how long Close waits for flush completions. The QP
// is destroyed afterwards either way, which ends all DMA.
const drainTimeout = 5 * time.Second

// Disconnect starts an orderly disconnect: rdma_disconnect (the peer sees
// RDMA_CM_EVENT_DISCONNECTED) and the QP moves to the error state, so every
// outstanding work request completes with WCWRFlushErr. Keep calling Poll
// to collect them; it returns ErrDisconnected once all have completed.
// Disconnect is idempotent.
func (c *Conn) Disconnect() error {
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.closed.Load() {
		return fmt.Errorf("rdma disconnect: %w", ErrClosed)
	}
	err := c.startDisconnect()
	c.w.wake()
	if err != nil {
		return fmt.Errorf("rdma disconnect: %w", err)
	}
	return nil
}

// startDisconnect calls rdma_disconnect once, moves the QP to the error
// state and posts the drain marker.
func (c *Conn) startDisconnect() error {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.disconnected {
		return nil
	}
	c.disconnected = true
	var errs []error
	if c.connected {
		if r := C.rd_disconnect(c.id); r != 0 {
			errs = append(errs, fmt.Errorf("rdma_disconnect: %w", errnoErr(int(r))))
		}
	}
	if c.id != nil {
		// rdma_disconnect already did this on InfiniBand and RoCE; it is
		// needed when it failed or was not called.
		if r := C.rd_qp_to_error(c.id); r != 0 {
			errs = append(errs, fmt.Errorf("ibv_modify_qp to error: %w", errnoErr(int(r))))
		}
	}
	c.postMarker()
	return errors.Join(errs...)
}

// Close disconnects, drains and releases the connection and every
// MemoryRegion still registered on it, in the order the Conn type
// documents. It unblocks a concurrent Poll (ErrClosed). Close is
// idempotent; later calls return the first call's result.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.w.wake()
		c.pollMu.Lock()
		c.postMu.Lock()
		c.closeErr = c.release(true)
		c.postMu.Unlock()
		c.pollMu.Unlock()
		if c.closeErr != nil {
			c.closeErr = fmt.Errorf("rdma close: %w", c.closeErr)
		}
	})
	return c.closeErr
}

// release tears down whatever exists. With drain set (an established
// connection) it first disconnects and waits for the flush completions.
func (c *Conn) release(drain bool) error {
	var errs []error
	if drain && c.id != nil && c.cq != nil {
		if err := c.startDisconnect(); err != nil {
			errs = append(errs, err)
		}
		if err := c.drain(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.id != nil {
		C.rd_destroy_qp(c.id)
	}
	c.mrMu.Lock()
	for m := range c.mrs {
		if err := m.release(); err != nil {
			errs = append(errs, err)
		}
	}
	c.mrs = nil
	c.mrMu.Unlock()
	if c.cq != nil {
		if r := C.rd_destroy_cq(c.cq); r != 0 {
			errs = append(errs, fmt.Errorf("ibv_destroy_cq: %w", errnoErr(int(r))))
		}
		c.cq = nil
	}
	if c.compCh != nil {
		if r := C.rd_destroy_comp_channel(c.compCh); r != 0 {
			errs = append(errs, fmt.Errorf("ibv_destroy_comp_channel: %w", errnoErr(int(r))))
		}
		c.compCh = nil
	}
	if c.pd != nil {
		if r := C.rd_dealloc_pd(c.pd); r != 0 {
			errs = append(errs, fmt.Errorf("ibv_dealloc_pd: %w", errnoErr(int(r))))
		}
		c.pd = nil
	}
	if c.id != nil {
		if r := C.rd_destroy_id(c.id); r != 0 {
			errs = append(errs, fmt.Errorf("rdma_destroy_id: %w", errnoErr(int(r))))
		}
		c.id = nil
	}
	if c.ch != nil {
		C.rd_destroy_channel(c.ch)
		c.ch = nil
	}
	for _, p := range []unsafe.Pointer{
		unsafe.Pointer(c.sendReqs), unsafe.Pointer(c.sendSGEs), unsafe.Pointer(c.sendWRs),
		unsafe.Pointer(c.sendBad), unsafe.Pointer(c.recvIDs), unsafe.Pointer(c.recvSGEs),
		unsafe.Pointer(c.recvWRs), unsafe.Pointer(c.recvBad), unsafe.Pointer(c.wcs),
	} {
		C.free(p)
	}
	c.sendReqs, c.sendSGEs, c.sendWRs, c.sendBad = nil, nil, nil, nil
	c.recvIDs, c.recvSGEs, c.recvWRs, c.recvBad, c.wcs = nil, nil, nil, nil, nil
	if c.w != nil {
		c.pollFd.Store(-1)
		c.w.close()
		c.w = nil
	}
	return errors.Join(errs...)
}

// drain polls (and drops) completions until the marker and every receive
// have completed, or drainTimeout passes.
func (c *Conn) drain() error {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	out := make([]Completion, pollBatch)
	c.armed = false
	for !c.drained() {
		n, err := c.pollCQ(out)
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if !c.armed {
			if r := C.rd_arm(c.cq); r != 0 {
				return fmt.Errorf("ibv_req_notify_cq: %w", errnoErr(int(r)))
			}
			c.armed = true
			continue
		}
		tags, err := c.w.wait(ctx)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("drain: %d receives and the send queue marker (seen %v) not flushed after %v",
				c.recvPending.Load(), c.markerSeen.Load(), drainTimeout)
		}
		if tags&tagComp != 0 {
			if C.rd_get_cq_event(c.compCh) > 0 {
				c.armed = false
			}
		}
		if tags&tagCM != 0 {
			c.handleCMEvents()
		}
	}
	return nil
}
