package nbdkernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
)

// connectConfig is everything NBD_CMD_CONNECT carries.
type connectConfig struct {
	index           int // < 0: let the kernel pick (no NBD_ATTR_INDEX)
	sizeBytes       uint64
	blockSizeBytes  uint64
	timeoutSec      uint64 // 0: not sent (the driver never times requests out)
	deadConnSec     uint64 // 0: not sent
	serverFlags     uint64
	clientFlags     uint64 // 0: not sent
	fds             []int
	backendIdentity string // "": not sent
}

// connectAttrs encodes the attributes of NBD_CMD_CONNECT, in the order of
// the uapi enum. Integers are in host byte order, as the kernel's
// nla_get_u32/u64 read them. NBD_ATTR_SOCKETS nests one NBD_SOCK_ITEM per
// socket, each holding an NBD_SOCK_FD.
func connectAttrs(c connectConfig) []byte {
	var attrs []*nl.RtAttr
	if c.index >= 0 {
		attrs = append(attrs, nl.NewRtAttr(attrIndex, nl.Uint32Attr(uint32(c.index))))
	}
	attrs = append(attrs,
		nl.NewRtAttr(attrSizeBytes, nl.Uint64Attr(c.sizeBytes)),
		nl.NewRtAttr(attrBlockSizeBytes, nl.Uint64Attr(c.blockSizeBytes)))
	if c.timeoutSec > 0 {
		attrs = append(attrs, nl.NewRtAttr(attrTimeout, nl.Uint64Attr(c.timeoutSec)))
	}
	attrs = append(attrs, nl.NewRtAttr(attrServerFlags, nl.Uint64Attr(c.serverFlags)))
	if c.clientFlags != 0 {
		attrs = append(attrs, nl.NewRtAttr(attrClientFlags, nl.Uint64Attr(c.clientFlags)))
	}
	socks := nl.NewRtAttr(attrSockets|int(nl.NLA_F_NESTED), nil)
	for _, fd := range c.fds {
		item := socks.AddRtAttr(sockItem|int(nl.NLA_F_NESTED), nil)
		item.AddRtAttr(sockFD, nl.Uint32Attr(uint32(fd)))
	}
	attrs = append(attrs, socks)
	if c.deadConnSec > 0 {
		attrs = append(attrs, nl.NewRtAttr(attrDeadConnTimeout, nl.Uint64Attr(c.deadConnSec)))
	}
	if c.backendIdentity != "" {
		attrs = append(attrs, nl.NewRtAttr(attrBackendIdentifier, nl.ZeroTerminated(c.backendIdentity)))
	}
	return serializeAttrs(attrs)
}

// indexAttrs encodes the NBD_ATTR_INDEX of NBD_CMD_DISCONNECT and
// NBD_CMD_STATUS; a negative index (STATUS of every device) encodes nothing.
func indexAttrs(index int) []byte {
	if index < 0 {
		return nil
	}
	return serializeAttrs([]*nl.RtAttr{nl.NewRtAttr(attrIndex, nl.Uint32Attr(uint32(index)))})
}

func serializeAttrs(attrs []*nl.RtAttr) []byte {
	var b []byte
	for _, a := range attrs {
		b = append(b, a.Serialize()...)
	}
	return b
}

// attribute is one decoded netlink attribute, its type without the
// NLA_F_NESTED and NLA_F_NET_BYTEORDER bits.
type attribute struct {
	typ   uint16
	value []byte
}

// parseAttrs decodes a run of attributes. The kernel pads every attribute
// to four bytes; a last one that is not padded is accepted too.
func parseAttrs(b []byte) ([]attribute, error) {
	if pad := len(b) % 4; pad != 0 {
		b = append(b[:len(b):len(b)], make([]byte, 4-pad)...)
	}
	ras, err := nl.ParseRouteAttr(b)
	if err != nil {
		return nil, fmt.Errorf("parse netlink attributes: %w", err)
	}
	attrs := make([]attribute, len(ras))
	for i, ra := range ras {
		attrs[i] = attribute{typ: ra.Attr.Type & nl.NLA_TYPE_MASK, value: ra.Value}
	}
	return attrs, nil
}

func attrU32(a attribute) (uint32, error) {
	if len(a.value) < 4 {
		return 0, fmt.Errorf("attribute %d: %d bytes, want a u32: %w", a.typ, len(a.value), syscall.EINVAL)
	}
	return binary.NativeEndian.Uint32(a.value), nil
}

// parseConnectReply finds NBD_ATTR_INDEX in the reply to NBD_CMD_CONNECT.
func parseConnectReply(b []byte) (int, error) {
	attrs, err := parseAttrs(b)
	if err != nil {
		return 0, err
	}
	for _, a := range attrs {
		if a.typ == attrIndex {
			v, err := attrU32(a)
			if err != nil {
				return 0, fmt.Errorf("connect reply: %w", err)
			}
			return int(v), nil
		}
	}
	return 0, errors.New("connect reply: no NBD_ATTR_INDEX")
}

// DeviceStatus is one entry of NBD_CMD_STATUS.
type DeviceStatus struct {
	// Index is N of /dev/nbdN.
	Index int
	// Connected reports a device with a configuration: attached, or
	// disconnected but still held open. Only a device that is not
	// connected can be attached.
	Connected bool
}

// parseStatusReply decodes NBD_ATTR_DEVICE_LIST of a NBD_CMD_STATUS reply.
func parseStatusReply(b []byte) ([]DeviceStatus, error) {
	attrs, err := parseAttrs(b)
	if err != nil {
		return nil, err
	}
	var out []DeviceStatus
	for _, a := range attrs {
		if a.typ != attrDeviceList {
			continue
		}
		items, err := parseAttrs(a.value)
		if err != nil {
			return nil, fmt.Errorf("status reply: device list: %w", err)
		}
		for _, it := range items {
			if it.typ != deviceItem {
				continue
			}
			fields, err := parseAttrs(it.value)
			if err != nil {
				return nil, fmt.Errorf("status reply: device item: %w", err)
			}
			st := DeviceStatus{Index: -1}
			for _, f := range fields {
				switch f.typ {
				case deviceIndex:
					v, err := attrU32(f)
					if err != nil {
						return nil, fmt.Errorf("status reply: %w", err)
					}
					st.Index = int(v)
				case deviceConnected:
					if len(f.value) < 1 {
						return nil, fmt.Errorf("status reply: empty NBD_DEVICE_CONNECTED: %w", syscall.EINVAL)
					}
					st.Connected = f.value[0] != 0
				}
			}
			if st.Index < 0 {
				return nil, errors.New("status reply: device item without NBD_DEVICE_INDEX")
			}
			out = append(out, st)
		}
	}
	return out, nil
}
