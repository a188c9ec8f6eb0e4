package rdma

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrNotSupported is returned by every entry point of a binary built
	// with CGO_ENABLED=0.
	ErrNotSupported = errors.New("built without RDMA support (CGO_ENABLED=0)")

	// ErrLibraryMissing is returned when libibverbs.so.1 or librdmacm.so.1
	// cannot be loaded at run time.
	ErrLibraryMissing = errors.New("rdma-core libraries not found; install rdma-core: apt-get install ibverbs-providers librdmacm1")

	// ErrClosed is returned by operations on a closed Conn, Listener or
	// MemoryRegion, and by a Poll or Accept that Close unblocked.
	ErrClosed = errors.New("rdma: use of closed connection")

	// ErrDisconnected is returned by Poll once the connection is
	// disconnected (by Disconnect or by the peer) and every work request
	// posted before has been reported.
	ErrDisconnected = errors.New("rdma: disconnected")

	// ErrNoDevice is returned when no RDMA device routes to an address.
	ErrNoDevice = errors.New("rdma: no RDMA device")
)

// RejectError reports an RDMA_CM_EVENT_REJECTED: the peer (or its CM)
// refused the connection. Reason is the transport's reject reason (for
// InfiniBand and RoCE the IB CM REJ reason: 28 consumer defined, 8 invalid
// service ID, i.e. nobody listens). PrivateData is what the peer sent with the
// reject; on IB/RoCE it is zero-padded to the REJ's fixed 148 bytes.
type RejectError struct {
	Reason      int
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rdma: connection rejected (reason %d)", e.Reason)
}

// CMEventError reports an RDMA CM event that ended an operation, such as
// RDMA_CM_EVENT_ADDR_ERROR or RDMA_CM_EVENT_UNREACHABLE. Status is the
// event's status, usually a negative errno.
type CMEventError struct {
	Event  CMEvent
	Status int
}

func (e *CMEventError) Error() string {
	if e.Status < 0 {
		return fmt.Sprintf("rdma: %v: %v", e.Event, syscall.Errno(-e.Status))
	}
	return fmt.Sprintf("rdma: %v (status %d)", e.Event, e.Status)
}

// Unwrap returns the errno carried by the event, if any.
func (e *CMEventError) Unwrap() error {
	if e.Status < 0 {
		return syscall.Errno(-e.Status)
	}
	return nil
}

// PostError reports a PostSend or PostRecv the provider refused part way:
// the first Posted work requests of the batch were posted and will
// complete, the rest were not.
type PostError struct {
	Op     string
	Posted int
	Err    error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("rdma: %s: %d work requests posted: %v", e.Op, e.Posted, e.Err)
}

func (e *PostError) Unwrap() error { return e.Err }

// errnoErr turns a negative errno returned by the C shim into an error.
func errnoErr(r int) error {
	if r >= 0 {
		return nil
	}
	return syscall.Errno(-r)
}
