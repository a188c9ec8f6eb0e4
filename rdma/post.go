//go:build cgo

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// PostSend posts send-queue work requests (SEND, RDMA WRITE, RDMA READ) as
// one chain with one cgo call per batch of up to SendDepth+1 requests. On a
// partial failure it returns a *PostError saying how many were posted.
// Every SGE must lie in a MemoryRegion of this Conn.
func (c *Conn) PostSend(wrs []SendWR) error {
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.closed.Load() {
		return fmt.Errorf("rdma post send: %w", ErrClosed)
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	posted := 0
	for posted < len(wrs) {
		n := min(len(wrs)-posted, c.sendCap)
		done, err := c.postSendBatch(wrs[posted:posted+n], false)
		posted += done
		if err != nil {
			return &PostError{Op: "post send", Posted: posted, Err: err}
		}
	}
	return nil
}

// postSendBatch fills the C scratch with wrs and posts them; c.sendMu held.
func (c *Conn) postSendBatch(wrs []SendWR, marker bool) (int, error) {
	reqs := unsafe.Slice(c.sendReqs, c.sendCap)
	sges := unsafe.Slice(c.sendSGEs, c.sendCap*c.opt.MaxSendSGE)
	nsge := 0
	for i := range wrs {
		wr := &wrs[i]
		if wr.ID == drainID && !marker {
			return 0, errReservedID
		}
		if len(wr.SGEs) > c.opt.MaxSendSGE {
			return 0, fmt.Errorf("work request %#x has %d SGEs, MaxSendSGE is %d", wr.ID, len(wr.SGEs), c.opt.MaxSendSGE)
		}
		r := &reqs[i]
		r.id = C.uint64_t(wr.ID)
		r.nsge = C.uint32_t(len(wr.SGEs))
		r.remote_addr = C.uint64_t(wr.RemoteAddr)
		r.rkey = C.uint32_t(wr.RKey)
		r.flags = 0
		if wr.Signaled {
			r.flags = C.IBV_SEND_SIGNALED
		}
		switch wr.Op {
		case OpSend:
			r.opcode = C.IBV_WR_SEND
		case OpRDMAWrite:
			r.opcode = C.IBV_WR_RDMA_WRITE
		case OpRDMARead:
			r.opcode = C.IBV_WR_RDMA_READ
		default:
			return 0, fmt.Errorf("work request %#x: opcode %v cannot be posted on the send queue", wr.ID, wr.Op)
		}
		for _, s := range wr.SGEs {
			sges[nsge] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
			nsge++
		}
	}
	r := C.rd_post_send(c.id, &reqs[0], C.int(len(wrs)), &sges[0], c.sendWRs, c.sendBad)
	if r != 0 {
		return int(*c.sendBad), fmt.Errorf("ibv_post_send: %w", errnoErr(int(r)))
	}
	return len(wrs), nil
}

// PostRecv posts receive work requests as one chain, one cgo call per batch
// of up to RecvDepth requests. On a partial failure it returns a *PostError.
func (c *Conn) PostRecv(wrs []RecvWR) error {
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.closed.Load() {
		return fmt.Errorf("rdma post recv: %w", ErrClosed)
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	posted := 0
	for posted < len(wrs) {
		n := min(len(wrs)-posted, c.recvCap)
		done, err := c.postRecvBatch(wrs[posted : posted+n])
		posted += done
		c.recvPending.Add(int64(done))
		if err != nil {
			return &PostError{Op: "post recv", Posted: posted, Err: err}
		}
	}
	return nil
}

func (c *Conn) postRecvBatch(wrs []RecvWR) (int, error) {
	ids := unsafe.Slice(c.recvIDs, c.recvCap)
	sges := unsafe.Slice(c.recvSGEs, c.recvCap)
	for i := range wrs {
		wr := &wrs[i]
		if wr.ID >= recvIDBit-1 {
			return i, fmt.Errorf("work request %#x: %w", wr.ID, errRecvID)
		}
		ids[i] = C.uint64_t(wr.ID | recvIDBit)
		sges[i] = C.struct_ibv_sge{addr: C.uint64_t(wr.SGE.Addr), length: C.uint32_t(wr.SGE.Length), lkey: C.uint32_t(wr.SGE.LKey)}
	}
	r := C.rd_post_recv(c.id, &ids[0], C.int(len(wrs)), &sges[0], c.recvWRs, c.recvBad)
	if r != 0 {
		return int(*c.recvBad), fmt.Errorf("ibv_post_recv: %w", errnoErr(int(r)))
	}
	return len(wrs), nil
}

// postMarker posts the zero-length, signaled drain marker on the send
// queue of a QP already in the error state, so that its flush completion
// tells that every earlier send-queue request has completed. It retries
// on later calls while the queue is full. c.stateMu held.
func (c *Conn) postMarker() {
	if c.markerPosted || c.id == nil || c.sendReqs == nil {
		return
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if _, err := c.postSendBatch([]SendWR{{ID: drainID, Signaled: true, Op: OpRDMAWrite}}, true); err == nil {
		c.markerPosted = true
	}
}
