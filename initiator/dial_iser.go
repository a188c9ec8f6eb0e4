package initiator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/rdma"
)

// ErrISERUnavailable is wrapped when an iSER connection cannot be made.
var ErrISERUnavailable = errors.New("iSER transport unavailable")

// rdmaConn adapts *rdma.Conn to RDMAConn.
type rdmaConn struct{ *rdma.Conn }

func (c rdmaConn) RegisterMemory(n int) (RDMAMemory, error) {
	m, err := c.Conn.RegisterMemory(n)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (c rdmaConn) RegisterBuffer(b []byte) (RDMAMemory, error) {
	m, err := c.Conn.RegisterBuffer(b)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (c rdmaConn) RemoteAddr() string { return c.Conn.RemoteAddr().String() }

// DialISER opens an RDMA CM connection to the portal with the iSER private
// data and starts the iSER datamover on it.
func DialISER(ctx context.Context, addr string, queueDepth int) (*ISERDatamover, error) {
	if err := rdma.Supported(); err != nil {
		return nil, fmt.Errorf("dial iser %s: %w: %w", addr, ErrISERUnavailable, err)
	}
	if queueDepth <= 0 {
		queueDepth = 128
	}
	c, err := rdma.Dial(ctx, addr, rdma.DialOptions{
		PrivateData: pdu.ISERPrivateData(),
		SendDepth:   queueDepth + iserControlSlots,
		RecvDepth:   queueDepth + iserControlSlots,
		MaxSendSGE:  2,
		MaxRecvSGE:  1,
	})
	if err != nil {
		return nil, fmt.Errorf("dial iser %s: %w", addr, err)
	}
	d, err := NewISERDatamover(rdmaConn{c}, queueDepth)
	if err != nil {
		return nil, fmt.Errorf("dial iser %s: %w", addr, err)
	}
	return d, nil
}

// DialConfig selects how DialDatamover connects.
type DialConfig struct {
	// Transport is tcp, iser or auto (iSER when an RDMA device routes to
	// the portal and the target accepts the connection, else TCP).
	Transport  string
	Addr       string // host:port
	QueueDepth int
	Logger     zerolog.Logger
}

// DialDatamover opens a connection to a portal with the chosen transport.
func DialDatamover(ctx context.Context, cfg DialConfig) (Datamover, error) {
	switch cfg.Transport {
	case "", TransportTCP:
		return DialTCP(ctx, cfg.Addr)
	case TransportISER:
		return DialISER(ctx, cfg.Addr, cfg.QueueDepth)
	case TransportAuto:
		d, why := dialAuto(ctx, cfg)
		if d != nil {
			cfg.Logger.Info().Str("portal", cfg.Addr).Str("transport", "iser").Str("why", why).Msg("transport chosen")
			return d, nil
		}
		cfg.Logger.Info().Str("portal", cfg.Addr).Str("transport", "tcp").Str("why", why).Msg("transport chosen")
		return DialTCP(ctx, cfg.Addr)
	}
	return nil, fmt.Errorf("dial %s: unknown transport %q (want tcp, iser or auto)", cfg.Addr, cfg.Transport)
}

// dialAuto tries iSER and says why it did or did not use it.
func dialAuto(ctx context.Context, cfg DialConfig) (Datamover, string) {
	if err := rdma.Supported(); err != nil {
		return nil, err.Error()
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, err.Error()
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil || len(ips) == 0 {
			return nil, fmt.Sprintf("cannot resolve %s for an RDMA route", host)
		}
		ip = ips[0]
	}
	link, err := rdma.DeviceForAddr(ip.Unmap())
	if err != nil {
		return nil, fmt.Sprintf("no RDMA device routes to %s: %v", ip, err)
	}
	d, err := DialISER(ctx, cfg.Addr, cfg.QueueDepth)
	if err != nil {
		return nil, fmt.Sprintf("iSER connection over %s failed: %v", link.Device, err)
	}
	return d, fmt.Sprintf("RDMA device %s routes to %s and the target accepted iSER", link.Device, ip)
}
