package rdma

import "fmt"

// Opcode names the kind of a work request and of its completion.
type Opcode uint8

// Opcodes. OpSend is the zero value so that a SendWR sends by default.
const (
	OpSend Opcode = iota
	OpRecv
	OpRDMAWrite
	OpRDMARead
)

func (o Opcode) String() string {
	switch o {
	case OpSend:
		return "SEND"
	case OpRecv:
		return "RECV"
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpRDMARead:
		return "RDMA_READ"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus uint32

// Work completion statuses, numbered as in infiniband/verbs.h.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
	WCTMErr
	WCTMRndvIncomplete
)

// wcStatusNames are the strings ibv_wc_status_str returns (rdma-core 44).
var wcStatusNames = [...]string{
	"success",
	"local length error",
	"local QP operation error",
	"local EE context operation error",
	"local protection error",
	"Work Request Flushed Error",
	"memory management operation error",
	"bad response error",
	"local access error",
	"remote invalid request error",
	"remote access error",
	"remote operation error",
	"transport retry counter exceeded",
	"RNR retry counter exceeded",
	"local RDD violation error",
	"remote invalid RD request",
	"aborted error",
	"invalid EE context number",
	"invalid EE context state",
	"fatal error",
	"response timeout error",
	"general error",
	"TM error",
	"TM software rendezvous",
}

// String returns the text ibv_wc_status_str gives for s.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "unknown"
}

// Completion is one work completion.
//
// Op is reliable for receives (they complete on their own queue) and for
// successful send-queue completions. A failed send-queue completion has no
// valid opcode in verbs; Op is then OpSend whatever was posted, so callers
// that need the kind must encode it in ID.
type Completion struct {
	ID     uint64
	Op     Opcode
	Status WCStatus
	// ByteLen is the number of bytes received (receives) or read (RDMA
	// READ); verbs leave it undefined otherwise.
	ByteLen uint32
	// InvalidatedRKey is the rkey the peer invalidated with
	// send-with-invalidate when HasInvalidate is set.
	InvalidatedRKey uint32
	HasInvalidate   bool
	// VendorErr is the provider's error syndrome for failed completions.
	VendorErr uint32
}

// Err returns nil for a successful completion and a *WCError otherwise.
func (c *Completion) Err() error {
	if c.Status == WCSuccess {
		return nil
	}
	return &WCError{ID: c.ID, Op: c.Op, Status: c.Status, VendorErr: c.VendorErr}
}

// WCError is a failed work completion as an error.
type WCError struct {
	ID        uint64
	Op        Opcode
	Status    WCStatus
	VendorErr uint32
}

func (e *WCError) Error() string {
	return fmt.Sprintf("rdma: %v work request %#x: %v (vendor error %#x)", e.Op, e.ID, e.Status, e.VendorErr)
}
