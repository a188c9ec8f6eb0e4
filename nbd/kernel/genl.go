package nbdkernel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
)

// transport is the generic netlink seam: the real one talks to the kernel,
// the tests' fake answers from an in-process model of the nbd driver.
type transport interface {
	// request sends one generic netlink request (NLM_F_REQUEST|NLM_F_ACK)
	// to family with the genl header {cmd, version} and the encoded
	// attributes, and returns the attributes of the reply (nil for a bare
	// ACK). A kernel error comes back as a syscall.Errno in the chain.
	request(ctx context.Context, family uint16, cmd, version uint8, attrs []byte) ([]byte, error)
}

// genlHeaderLen is sizeof(struct genlmsghdr): cmd, version, reserved u16.
const genlHeaderLen = 4

// netlinkTransport is the kernel: one NETLINK_GENERIC socket per request,
// built and run by the vishvananda/netlink nl package.
type netlinkTransport struct{}

func (netlinkTransport) request(ctx context.Context, family uint16, cmd, version uint8, attrs []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := nl.Subscribe(syscall.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("open generic netlink socket: %w", err)
	}
	defer s.Close()
	// The socket has no timeouts of its own; ctx bounds the call by
	// closing it, which fails a pending receive.
	stop := context.AfterFunc(ctx, s.Close)
	defer stop()

	req := nl.NewNetlinkRequest(int(family), syscall.NLM_F_ACK)
	req.Sockets = map[int]*nl.SocketHandle{syscall.NETLINK_GENERIC: {Socket: s}}
	// The genl header is written by hand: nl.Genlmsg serialises only its
	// two fields plus whatever follows them in memory.
	req.AddRawData(append([]byte{cmd, version, 0, 0}, attrs...))
	var reply []byte
	err = req.ExecuteIter(syscall.NETLINK_GENERIC, 0, func(msg []byte) bool {
		if reply == nil && len(msg) >= genlHeaderLen {
			reply = append([]byte{}, msg[genlHeaderLen:]...)
		}
		return true
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%w (%v)", ctxErr, err)
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return nil, errno
		}
		return nil, err
	}
	return reply, nil
}

// client speaks the nbd generic netlink family over a transport.
type client struct {
	tr     transport
	family uint16
}

// dial resolves the "nbd" family. A kernel without it gives an
// *UnsupportedError.
func dial(ctx context.Context, tr transport) (*client, error) {
	attrs := serializeAttrs([]*nl.RtAttr{
		nl.NewRtAttr(nl.GENL_CTRL_ATTR_FAMILY_NAME, nl.ZeroTerminated(genlFamilyName))})
	reply, err := tr.request(ctx, nl.GENL_ID_CTRL, nl.GENL_CTRL_CMD_GETFAMILY, nl.GENL_CTRL_VERSION, attrs)
	if errors.Is(err, syscall.ENOENT) {
		return nil, unsupported(err)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve generic netlink family %q: %w", genlFamilyName, err)
	}
	as, err := parseAttrs(reply)
	if err != nil {
		return nil, fmt.Errorf("resolve generic netlink family %q: %w", genlFamilyName, err)
	}
	for _, a := range as {
		if a.typ == nl.GENL_CTRL_ATTR_FAMILY_ID && len(a.value) >= 2 {
			return &client{tr: tr, family: binary.NativeEndian.Uint16(a.value)}, nil
		}
	}
	return nil, fmt.Errorf("resolve generic netlink family %q: no CTRL_ATTR_FAMILY_ID in the reply", genlFamilyName)
}

// connect sends NBD_CMD_CONNECT and returns the index of the device the
// kernel configured.
func (c *client) connect(ctx context.Context, cfg connectConfig) (int, error) {
	reply, err := c.tr.request(ctx, c.family, cmdConnect, genlVersion, connectAttrs(cfg))
	if err != nil {
		return 0, fmt.Errorf("NBD_CMD_CONNECT: %w", err)
	}
	index, err := parseConnectReply(reply)
	if err != nil {
		return 0, fmt.Errorf("NBD_CMD_CONNECT: %w", err)
	}
	if cfg.index >= 0 && index != cfg.index {
		return 0, fmt.Errorf("NBD_CMD_CONNECT: asked for nbd%d, kernel configured nbd%d", cfg.index, index)
	}
	return index, nil
}

// disconnect sends NBD_CMD_DISCONNECT for one device.
func (c *client) disconnect(ctx context.Context, index int) error {
	if _, err := c.tr.request(ctx, c.family, cmdDisconnect, genlVersion, indexAttrs(index)); err != nil {
		return fmt.Errorf("NBD_CMD_DISCONNECT nbd%d: %w", index, err)
	}
	return nil
}

// waitUnbound polls NBD_CMD_STATUS until device index has no
// configuration. One still configured when ctx ends is held open (a mount,
// a process): ErrHeldOpen.
func (c *client) waitUnbound(ctx context.Context, index int) error {
	delay := 10 * time.Millisecond
	for {
		st, err := c.status(ctx, index)
		if err != nil {
			return fmt.Errorf("waiting for the device to unbind: %w", err)
		}
		if len(st) == 0 || !st[0].Connected {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("device still configured after NBD_CMD_DISCONNECT: %w (mounted, or open in a process): %w", ErrHeldOpen, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// status sends NBD_CMD_STATUS for one device, or every device when index
// is negative.
func (c *client) status(ctx context.Context, index int) ([]DeviceStatus, error) {
	reply, err := c.tr.request(ctx, c.family, cmdStatus, genlVersion, indexAttrs(index))
	if err != nil {
		return nil, fmt.Errorf("NBD_CMD_STATUS: %w", err)
	}
	st, err := parseStatusReply(reply)
	if err != nil {
		return nil, fmt.Errorf("NBD_CMD_STATUS: %w", err)
	}
	return st, nil
}
