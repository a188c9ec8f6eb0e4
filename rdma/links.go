//go:build linux

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// netlinkRDMA is NETLINK_RDMA from linux/netlink.h.
const netlinkRDMA = 20

// Link is one port of an RDMA device, as `rdma link show` lists it.
type Link struct {
	Device      string `json:"device"`       // "rxe0"
	DeviceIndex uint32 `json:"device_index"` // the kernel's ib device index
	Port        uint32 `json:"port"`
	NodeGUID    string `json:"node_guid"`  // "5054:00ff:fe12:3456"
	State       string `json:"state"`      // "ACTIVE", "DOWN", ...
	PhysState   string `json:"phys_state"` // "LINK_UP", "DISABLED", ...
	NetDev      string `json:"netdev,omitempty"`
	NetDevIndex uint32 `json:"netdev_index,omitempty"`
}

// Links lists every port of every RDMA device by RDMA netlink (no cgo, no
// rdma-core). It returns an empty list when the kernel has RDMA but no
// device, and an error when the kernel has no RDMA netlink at all.
func Links() ([]Link, error) {
	devs, err := nldevDump(nl.RDMA_NLDEV_CMD_GET, nil)
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	indexes, err := deviceIndexes(devs)
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	var ports [][]byte
	for _, idx := range indexes {
		// The kernel dumps the ports of one device per request.
		b := make([]byte, 4)
		binary.NativeEndian.PutUint32(b, idx)
		msgs, err := nldevDump(rdmaNLDevCmdPortGet, nl.NewRtAttr(attrDevIndex, b))
		if err != nil {
			return nil, fmt.Errorf("list ports of rdma device %d: %w", idx, err)
		}
		ports = append(ports, msgs...)
	}
	return parseLinks(devs, ports)
}

// nldevDump sends one RDMA_NL_NLDEV dump request.
func nldevDump(cmd int, attr *nl.RtAttr) ([][]byte, error) {
	req := nl.NewNetlinkRequest(nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT|cmd, syscall.NLM_F_DUMP)
	if attr != nil {
		req.AddData(attr)
	}
	msgs, err := req.Execute(netlinkRDMA, 0)
	if err != nil {
		if errors.Is(err, syscall.EPROTONOSUPPORT) {
			return nil, fmt.Errorf("kernel without RDMA (NETLINK_RDMA): %w", err)
		}
		return nil, err
	}
	return msgs, nil
}

// DeviceForAddr finds the RDMA port that traffic to ip leaves by: the
// netdev that holds ip (a loopback portal on rxe) or the netdev of the route
// to ip, then the RDMA port bound to that netdev. The error wraps ErrNoDevice
// when no RDMA port is bound to it.
func DeviceForAddr(ip netip.Addr) (Link, error) {
	ifindex, ifname, err := netdevForAddr(ip)
	if err != nil {
		return Link{}, fmt.Errorf("find rdma device for %v: %w", ip, err)
	}
	links, err := Links()
	if err != nil {
		return Link{}, fmt.Errorf("find rdma device for %v: %w", ip, err)
	}
	l, ok := pickLink(links, uint32(ifindex))
	if !ok {
		return Link{}, fmt.Errorf("find rdma device for %v: netdev %s: %w (try: iser-attach rdma setup --netdev %s)", ip, ifname, ErrNoDevice, ifname)
	}
	return l, nil
}

// pickLink returns the port bound to netdev ifindex, preferring an active one.
func pickLink(links []Link, ifindex uint32) (Link, bool) {
	var found *Link
	for i := range links {
		l := &links[i]
		if l.NetDevIndex != ifindex || ifindex == 0 {
			continue
		}
		if l.State == "ACTIVE" {
			return *l, true
		}
		if found == nil {
			found = l
		}
	}
	if found == nil {
		return Link{}, false
	}
	return *found, true
}

// netdevForAddr returns the interface that holds ip, or else the one the
// route to ip uses.
func netdevForAddr(ip netip.Addr) (int, string, error) {
	ip = ip.Unmap()
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return 0, "", fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
			return linkName(a.LinkIndex)
		}
	}
	routes, err := netlink.RouteGet(net.IP(ip.AsSlice()))
	if err != nil {
		return 0, "", fmt.Errorf("route to %v: %w", ip, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex == 0 {
		return 0, "", fmt.Errorf("route to %v: no interface", ip)
	}
	return linkName(routes[0].LinkIndex)
}

func linkName(index int) (int, string, error) {
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return 0, "", fmt.Errorf("interface %d: %w", index, err)
	}
	return index, l.Attrs().Name, nil
}

// AddSoftRoCE creates a soft-RoCE (rdma_rxe) device name on netdev, like
// `rdma link add NAME type rxe netdev NETDEV`. The kernel loads rdma_rxe on
// demand where modprobe works. It succeeds without change when name
// already exists on netdev.
func AddSoftRoCE(name, netdev string) error {
	if _, err := netlink.LinkByName(netdev); err != nil {
		return fmt.Errorf("add soft-RoCE %s: netdev %s: %w", name, netdev, err)
	}
	if links, err := Links(); err == nil {
		for _, l := range links {
			if l.Device != name {
				continue
			}
			if l.NetDev == netdev {
				return nil
			}
			return fmt.Errorf("add soft-RoCE %s: device exists on netdev %q: %w", name, l.NetDev, syscall.EEXIST)
		}
	}
	if err := netlink.RdmaLinkAdd(name, "rxe", netdev); err != nil {
		hint := ""
		if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EPROTONOSUPPORT) {
			hint = " (try: modprobe rdma_rxe)"
		}
		return fmt.Errorf("add soft-RoCE %s on %s: %w%s", name, netdev, err, hint)
	}
	return nil
}

// DeleteLink removes an RDMA link (such as a soft-RoCE device), like
// `rdma link delete NAME`.
func DeleteLink(name string) error {
	if err := netlink.RdmaLinkDel(name); err != nil {
		return fmt.Errorf("delete rdma link %s: %w", name, err)
	}
	return nil
}
