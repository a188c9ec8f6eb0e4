package rdma

// SGE is one scatter/gather element: Length bytes at Addr inside a
// MemoryRegion whose LKey is LKey. Its layout matches struct ibv_sge.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send-queue work request. The zero Op is OpSend; OpRDMAWrite
// and OpRDMARead move data to or from RemoteAddr in the peer's memory
// registered under RKey (the passive side of iSER, a target, issues them).
// Signaled requests produce a Completion; unsignaled ones complete silently
// once a later signaled request on the same queue completes.
type SendWR struct {
	ID       uint64
	SGEs     []SGE
	Signaled bool
	Op       Opcode

	// RemoteAddr and RKey address the peer's memory for OpRDMAWrite and
	// OpRDMARead; they are ignored for OpSend.
	RemoteAddr uint64
	RKey       uint32
}

// RecvWR is one receive-queue work request. Receives are always signaled.
// A zero-length SGE posts a receive without a buffer.
type RecvWR struct {
	ID  uint64
	SGE SGE
}

// drainID is the work-request ID of the marker Close and Disconnect post
// to learn that the send queue is flushed. Callers must not use it.
const drainID = ^uint64(0)

// recvIDBit marks a receive's work-request ID on the verbs side: send and
// receive completions share one CQ, and a flushed completion's opcode is
// undefined, so the ID tells them apart. Receive IDs must be below
// recvIDBit-1 (recvIDBit-1 would become drainID).
const recvIDBit = uint64(1) << 63
