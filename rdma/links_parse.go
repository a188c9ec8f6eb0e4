package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// RDMA netlink (RDMA_NL_NLDEV) numbers from rdma/rdma_netlink.h that
// vishvananda/netlink's nl package lacks.
const (
	rdmaNLDevCmdPortGet = 5

	attrDevIndex      = 1
	attrDevName       = 2
	attrPortIndex     = 3
	attrNodeGUID      = 6
	attrPortState     = 12
	attrPortPhysState = 13
	attrNDevIndex     = 50
	attrNDevName      = 51

	nlaTypeMask = 0x3fff // strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

var errAttr = errors.New("malformed netlink attribute")

// nlAttr is one netlink attribute.
type nlAttr struct {
	typ  uint16
	data []byte
}

// parseAttrs splits a netlink message payload into attributes, checking
// every length against the buffer.
func parseAttrs(b []byte) ([]nlAttr, error) {
	var attrs []nlAttr
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: %d trailing bytes", errAttr, len(b))
		}
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4]) & nlaTypeMask
		if l < 4 || l > len(b) {
			return nil, fmt.Errorf("%w: type %d length %d with %d bytes left", errAttr, t, l, len(b))
		}
		attrs = append(attrs, nlAttr{typ: t, data: b[4:l]})
		aligned := (l + 3) &^ 3
		if aligned > len(b) {
			aligned = len(b)
		}
		b = b[aligned:]
	}
	return attrs, nil
}

func attrU32(a nlAttr) (uint32, error) {
	if len(a.data) != 4 {
		return 0, fmt.Errorf("%w: type %d: u32 of %d bytes", errAttr, a.typ, len(a.data))
	}
	return binary.NativeEndian.Uint32(a.data), nil
}

func attrU64(a nlAttr) (uint64, error) {
	if len(a.data) != 8 {
		return 0, fmt.Errorf("%w: type %d: u64 of %d bytes", errAttr, a.typ, len(a.data))
	}
	return binary.NativeEndian.Uint64(a.data), nil
}

func attrU8(a nlAttr) (uint8, error) {
	if len(a.data) != 1 {
		return 0, fmt.Errorf("%w: type %d: u8 of %d bytes", errAttr, a.typ, len(a.data))
	}
	return a.data[0], nil
}

func attrString(a nlAttr) string {
	d := a.data
	for i, c := range d {
		if c == 0 {
			d = d[:i]
			break
		}
	}
	return string(d)
}

// formatGUID prints a GUID as rdma-core does: four groups of 16 bits.
func formatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// Port state and physical state names (enum ib_port_state and the IB
// physical port states), as the rdma tool prints them.
var (
	portStates     = []string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	portPhysStates = []string{"", "SLEEP", "POLLING", "DISABLED", "PORT_CONFIGURATION_TRAINING", "LINK_UP", "LINK_ERROR_RECOVERY", "PHY_TEST"}
)

func stateName(names []string, v uint8) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%d", v)
}

// deviceIndexes returns the device indexes of RDMA_NLDEV_CMD_GET messages.
func deviceIndexes(devMsgs [][]byte) ([]uint32, error) {
	var out []uint32
	for _, m := range devMsgs {
		attrs, err := parseAttrs(m)
		if err != nil {
			return nil, fmt.Errorf("rdma device message: %w", err)
		}
		found := false
		for _, a := range attrs {
			if a.typ == attrDevIndex {
				idx, err := attrU32(a)
				if err != nil {
					return nil, fmt.Errorf("rdma device message: %w", err)
				}
				out = append(out, idx)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("rdma device message: %w: no device index", errAttr)
		}
	}
	return out, nil
}

// parseLinks joins RDMA_NLDEV_CMD_GET messages (one per device) with
// RDMA_NLDEV_CMD_PORT_GET messages (one per port) into Links sorted by
// device and port.
func parseLinks(devMsgs, portMsgs [][]byte) ([]Link, error) {
	guids := make(map[uint32]string)
	for _, m := range devMsgs {
		attrs, err := parseAttrs(m)
		if err != nil {
			return nil, fmt.Errorf("rdma device message: %w", err)
		}
		var idx uint32
		var guid string
		for _, a := range attrs {
			switch a.typ {
			case attrDevIndex:
				if idx, err = attrU32(a); err != nil {
					return nil, err
				}
			case attrNodeGUID:
				g, err := attrU64(a)
				if err != nil {
					return nil, err
				}
				guid = formatGUID(g)
			}
		}
		guids[idx] = guid
	}
	links := make([]Link, 0, len(portMsgs))
	for _, m := range portMsgs {
		attrs, err := parseAttrs(m)
		if err != nil {
			return nil, fmt.Errorf("rdma port message: %w", err)
		}
		var l Link
		for _, a := range attrs {
			var v8 uint8
			switch a.typ {
			case attrDevIndex:
				l.DeviceIndex, err = attrU32(a)
			case attrDevName:
				l.Device = attrString(a)
			case attrPortIndex:
				l.Port, err = attrU32(a)
			case attrPortState:
				v8, err = attrU8(a)
				l.State = stateName(portStates, v8)
			case attrPortPhysState:
				v8, err = attrU8(a)
				l.PhysState = stateName(portPhysStates, v8)
			case attrNDevIndex:
				l.NetDevIndex, err = attrU32(a)
			case attrNDevName:
				l.NetDev = attrString(a)
			}
			if err != nil {
				return nil, fmt.Errorf("rdma port message: %w", err)
			}
		}
		if l.Device == "" {
			return nil, fmt.Errorf("rdma port message: %w: no device name", errAttr)
		}
		l.NodeGUID = guids[l.DeviceIndex]
		links = append(links, l)
	}
	sort.Slice(links, func(i, j int) bool {
		if links[i].Device != links[j].Device {
			return links[i].Device < links[j].Device
		}
		return links[i].Port < links[j].Port
	})
	return links, nil
}
