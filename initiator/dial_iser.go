package initiator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

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
// data and starts the iSER datamover on it. When the host has no RDMA
// device (or the binary no RDMA support) the error wraps
// ErrISERUnavailable and says how to get one.
func DialISER(ctx context.Context, addr string, queueDepth int) (*ISERDatamover, error) {
	if err := rdma.Supported(); err != nil {
		return nil, fmt.Errorf("dial iser %s: %w: %w%s", addr, ErrISERUnavailable, err, iserHint())
	}
	if queueDepth <= 0 {
		queueDepth = 128
	}
	c, err := rdma.Dial(ctx, addr, rdma.DialOptions{
		PrivateData: pdu.ISERPrivateData(),
		SendDepth:   queueDepth + iserControlSlots,
		RecvDepth:   iserRecvRing(queueDepth),
		MaxSendSGE:  2,
		MaxRecvSGE:  1,
	})
	if err != nil {
		if hint := iserHint(); hint != "" {
			return nil, fmt.Errorf("dial iser %s: %w: %w%s", addr, ErrISERUnavailable, err, hint)
		}
		return nil, fmt.Errorf("dial iser %s: %w", addr, err)
	}
	d, err := NewISERDatamover(rdmaConn{c}, queueDepth)
	if err != nil {
		return nil, fmt.Errorf("dial iser %s: %w", addr, err)
	}
	return d, nil
}

// iserHint says what to do when the host has no RDMA device, or is ""
// when it has one.
func iserHint() string {
	if links, err := rdma.Links(); err == nil && len(links) > 0 {
		return ""
	}
	return "; this host has no RDMA device: list devices with `iser-attach rdma list`, " +
		"create a soft-RoCE one with `iser-attach rdma setup --netdev IFACE`, or use --transport tcp"
}

// DialConfig selects how DialDatamover connects.
type DialConfig struct {
	// Transport is tcp, iser or auto (iSER when an RDMA device routes to
	// the portal and the target accepts the connection, else TCP).
	Transport  string
	Addr       string // host:port
	QueueDepth int
	Logger     zerolog.Logger
	// ConnectTimeout, when positive, bounds the transport connection alone
	// (TCP connect, RDMA CM resolve and connect); the login exchange on it
	// keeps the caller's deadline.
	ConnectTimeout time.Duration
}

// DialDatamover opens a connection to a portal with the chosen transport.
// In auto mode the choice is one info line per portal and process (again
// only when it changes, as when recovery dials anew), with the details at
// debug level.
func DialDatamover(ctx context.Context, cfg DialConfig) (Datamover, error) {
	switch cfg.Transport {
	case "", TransportTCP:
		return DialTCP(ctx, cfg.Addr)
	case TransportISER:
		return DialISER(ctx, cfg.Addr, cfg.QueueDepth)
	case TransportAuto:
		d, c := dialAuto(ctx, cfg)
		transport := TransportTCP
		if d != nil {
			transport = TransportISER
		}
		ev := cfg.Logger.Debug()
		if prev, seen := autoChoices.Swap(cfg.Addr, transport); !seen || prev != transport {
			ev = cfg.Logger.Info()
		}
		ev.Str("portal", cfg.Addr).Str("transport", transport).Str("reason", c.reason).Msg("transport chosen")
		if c.detail != nil {
			cfg.Logger.Debug().Str("portal", cfg.Addr).Err(c.detail).Msg("why not iSER")
		}
		if d != nil {
			return d, nil
		}
		return DialTCP(ctx, cfg.Addr)
	}
	return nil, fmt.Errorf("dial %s: unknown transport %q (want tcp, iser or auto)", cfg.Addr, cfg.Transport)
}

// autoChoices holds the transport auto mode last chose for each portal.
var autoChoices sync.Map

// autoChoice says why auto mode chose its transport: a short reason for
// the info line, and the error behind it, if any, for the debug one.
type autoChoice struct {
	reason string
	detail error
}

// dialAuto tries iSER and says why it did or did not use it.
func dialAuto(ctx context.Context, cfg DialConfig) (Datamover, autoChoice) {
	if err := rdma.Supported(); err != nil {
		if errors.Is(err, rdma.ErrNotSupported) {
			return nil, autoChoice{"built without RDMA support", nil}
		}
		return nil, autoChoice{"rdma-core libraries not installed", err}
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, autoChoice{"bad portal address", err}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil || len(ips) == 0 {
			return nil, autoChoice{"cannot resolve " + host + " for an RDMA route", lerr}
		}
		ip = ips[0]
	}
	link, err := rdma.DeviceForAddr(ip.Unmap())
	if err != nil {
		return nil, autoChoice{"no RDMA device routes to " + ip.String(), err}
	}
	d, err := DialISER(ctx, cfg.Addr, cfg.QueueDepth)
	if err != nil {
		return nil, autoChoice{"iSER connection over " + link.Device + " failed", err}
	}
	return d, autoChoice{"RDMA device " + link.Device + " routes to " + ip.String(), nil}
}
