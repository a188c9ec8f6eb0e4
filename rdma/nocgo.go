//go:build !cgo

package rdma

import (
	"context"
	"fmt"
	"net/netip"
)

// Conn is an RDMA reliable connection. This build has no RDMA support:
// see the cgo build for the documentation of every method.
type Conn struct{}

// Listener accepts RDMA connections (not supported in this build).
type Listener struct{}

// ConnRequest is a pending connection request (not supported in this build).
type ConnRequest struct{}

// MemoryRegion is registered memory (not supported in this build).
type MemoryRegion struct{}

func notSupported(op string) error { return fmt.Errorf("%s: %w", op, ErrNotSupported) }

// Supported reports why RDMA cannot be used: always ErrNotSupported here.
func Supported() error { return notSupported("rdma") }

// Dial returns ErrNotSupported.
func Dial(ctx context.Context, addr string, opt DialOptions) (*Conn, error) {
	return nil, notSupported("rdma dial " + addr)
}

// Listen returns ErrNotSupported.
func Listen(addr string, opt DialOptions) (*Listener, error) {
	return nil, notSupported("rdma listen " + addr)
}

func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	return nil, notSupported("rdma accept")
}
func (l *Listener) AcceptRequest(ctx context.Context) (*ConnRequest, error) {
	return nil, notSupported("rdma accept")
}
func (l *Listener) Addr() netip.AddrPort { return netip.AddrPort{} }
func (l *Listener) Close() error         { return nil }

func (r *ConnRequest) PrivateData() []byte { return nil }
func (r *ConnRequest) Accept(ctx context.Context, privateData []byte) (*Conn, error) {
	return nil, notSupported("rdma accept")
}
func (r *ConnRequest) Reject(privateData []byte) error { return notSupported("rdma reject") }

func (c *Conn) PeerPrivateData() []byte { return nil }
func (c *Conn) RegisterMemory(size int) (*MemoryRegion, error) {
	return nil, notSupported("rdma register memory")
}
func (c *Conn) RegisterBuffer(b []byte) (*MemoryRegion, error) {
	return nil, notSupported("rdma register buffer")
}
func (c *Conn) PostSend(wrs []SendWR) error { return notSupported("rdma post send") }
func (c *Conn) PostRecv(wrs []RecvWR) error { return notSupported("rdma post recv") }
func (c *Conn) Poll(ctx context.Context, out []Completion) (int, error) {
	return 0, notSupported("rdma poll")
}
func (c *Conn) TryPoll(out []Completion) (int, error) { return 0, notSupported("rdma poll") }
func (c *Conn) PollFd() int                           { return -1 }
func (c *Conn) Disconnect() error                     { return notSupported("rdma disconnect") }
func (c *Conn) Close() error                          { return nil }
func (c *Conn) Device() string                        { return "" }
func (c *Conn) LocalAddr() netip.AddrPort             { return netip.AddrPort{} }
func (c *Conn) RemoteAddr() netip.AddrPort            { return netip.AddrPort{} }
func (c *Conn) ResponderResources() int               { return 0 }
func (c *Conn) InitiatorDepth() int                   { return 0 }
func (m *MemoryRegion) Bytes() []byte                 { return nil }
func (m *MemoryRegion) Addr() uint64                  { return 0 }
func (m *MemoryRegion) LKey() uint32                  { return 0 }
func (m *MemoryRegion) RKey() uint32                  { return 0 }
func (m *MemoryRegion) SGE(off, n int) SGE            { return SGE{} }
func (m *MemoryRegion) Close() error                  { return nil }
