package discovery

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// DefaultPort is the iSCSI port (RFC 7143 section 13.8): also the port of
// an iSER portal.
const DefaultPort = 3260

// Errors from ParsePortal and ParseSendTargets, wrapped with the input.
var (
	ErrBadPortal      = errors.New("malformed portal address")
	ErrBadSendTargets = errors.New("malformed SendTargets response")
)

// Portal is one network portal of a target: an address, a TCP (or RDMA CM)
// port and the portal group tag the target reported.
type Portal struct {
	// Host is an IPv4 address, an IPv6 address without brackets (zone
	// allowed) or a DNS host name.
	Host string
	Port int
	// GroupTag is the target portal group tag, 0..65535, or -1 when the
	// address carried none.
	GroupTag int
}

// String is host:port with IPv6 in brackets ("10.0.0.1:3260",
// "[fe80::1]:3260", "host.example:3260"); the group tag is left out.
func (p Portal) String() string {
	return net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
}

// Target is one target of a SendTargets response with its portals, in the
// order the target listed them. No portals means the target is reached
// through the portal the discovery session used.
type Target struct {
	Name    string
	Portals []Portal
}

// ParsePortal parses a portal address as written in TargetAddress (RFC
// 7143 section 13.8) or given on the command line: host, host:port,
// [v6], [v6]:port, each optionally followed by ",tag". The port defaults
// to DefaultPort. An IPv6 address without brackets is accepted only when
// the whole string (before any ",tag") parses as an IP address, so it
// never carries a port.
func ParsePortal(s string) (Portal, error) {
	p, err := stParsePortal(s)
	if err != nil {
		return Portal{}, fmt.Errorf("parse portal %q: %w: %v", s, ErrBadPortal, err)
	}
	return p, nil
}

func stParsePortal(s string) (Portal, error) {
	p := Portal{Port: DefaultPort, GroupTag: -1}
	if strings.Count(s, ",") > 1 {
		return p, errors.New("more than one ',': one portal each, as host:port,tpgt (several portals are several --portal flags or portal = lines)")
	}
	addr := s
	if i := strings.LastIndexByte(s, ','); i >= 0 {
		tag, err := stParseUint(s[i+1:], 0, 65535)
		if err != nil {
			return p, fmt.Errorf("portal group tag: %v", err)
		}
		addr, p.GroupTag = s[:i], tag
	}
	if addr == "" {
		return p, errors.New("empty address")
	}

	host, port := addr, ""
	switch {
	case addr[0] == '[':
		end := strings.IndexByte(addr, ']')
		if end < 0 {
			return p, errors.New("missing ']'")
		}
		host, port = addr[1:end], addr[end+1:]
		if port != "" {
			if port[0] != ':' {
				return p, fmt.Errorf("unexpected %q after ']'", port)
			}
			port = port[1:]
			if port == "" {
				return p, errors.New("empty port")
			}
		}
		if err := stCheckIPv6(host); err != nil {
			return p, fmt.Errorf("%q in brackets is not an IPv6 address: %v", host, err)
		}
	case strings.Count(addr, ":") > 1:
		if err := stCheckIPv6(addr); err != nil {
			return p, fmt.Errorf("IPv6 address with a port must be in brackets (%v)", err)
		}
	default:
		if i := strings.IndexByte(addr, ':'); i >= 0 {
			host, port = addr[:i], addr[i+1:]
			if port == "" {
				return p, errors.New("empty port")
			}
		}
		if err := stCheckHost(host); err != nil {
			return p, err
		}
	}
	if port != "" {
		n, err := stParseUint(port, 1, 65535)
		if err != nil {
			return p, fmt.Errorf("port: %v", err)
		}
		p.Port = n
	}
	p.Host = host
	return p, nil
}

// stCheckIPv6 accepts an IPv6 address with an optional zone made of
// interface-name characters (letters, digits, '.', '_', '-').
func stCheckIPv6(h string) error {
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return err
	}
	if !ip.Is6() {
		return errors.New("not IPv6")
	}
	zone := ip.Zone()
	if len(zone) > 15 {
		return errors.New("zone longer than 15 bytes")
	}
	for i := 0; i < len(zone); i++ {
		c := zone[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("bad character %q in zone", c)
		}
	}
	return nil
}

// stCheckHost accepts a dotted-quad IPv4 address or a DNS host name
// (RFC 1123 labels: letters, digits, '-', 1..63 bytes, 253 in all).
func stCheckHost(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if strings.Trim(h, "0123456789.") == "" {
		ip, err := netip.ParseAddr(h)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("%q is not an IPv4 address", h)
		}
		return nil
	}
	if len(h) > 253 {
		return errors.New("host name longer than 253 bytes")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("bad host name label %q", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("bad character %q in host name", c)
			}
		}
	}
	return nil
}

// stParseUint parses a plain decimal number in lo..hi.
func stParseUint(s string, lo, hi int) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	n, _ := strconv.Atoi(s)
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d out of range %d..%d", n, lo, hi)
	}
	return n, nil
}

// ParseSendTargets reads the key=value pairs of a SendTargets response
// (RFC 7143 Appendix D, sections 13.4 and 13.8). Each TargetName starts a
// target; each TargetAddress=addr[:port][,tag] that follows adds a portal
// to it. A TargetName seen before continues that target (its portals are
// merged); a portal listed twice for a target is kept once.
//
// It fails on a TargetAddress before any TargetName, an empty or malformed
// name or address, a bad port or tag, and on keys a SendTargets response
// does not hold. TargetAlias and vendor extension keys (X-..., X#...) are
// skipped: RFC 7143 lets a target add them and they name no portal.
func ParseSendTargets(kvs []textkey.KV) ([]Target, error) {
	var targets []Target
	cur := -1
	for i, kv := range kvs {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("parse SendTargets response: pair %d %s=%q: %w: %s",
				i, kv.Key, kv.Value, ErrBadSendTargets, fmt.Sprintf(format, args...))
		}
		switch {
		case kv.Key == "TargetName":
			if err := stCheckName(kv.Value); err != nil {
				return nil, bad("%v", err)
			}
			cur = -1
			for j := range targets {
				if targets[j].Name == kv.Value {
					cur = j
				}
			}
			if cur < 0 {
				targets = append(targets, Target{Name: kv.Value})
				cur = len(targets) - 1
			}
		case kv.Key == "TargetAddress":
			if cur < 0 {
				return nil, bad("TargetAddress before any TargetName")
			}
			p, err := stParsePortal(kv.Value)
			if err != nil {
				return nil, bad("%v", err)
			}
			t := &targets[cur]
			dup := false
			for _, q := range t.Portals {
				dup = dup || q == p
			}
			if !dup {
				t.Portals = append(t.Portals, p)
			}
		case kv.Key == "TargetAlias", strings.HasPrefix(kv.Key, "X-"), strings.HasPrefix(kv.Key, "X#"):
			// Not a portal; skipped.
		default:
			return nil, bad("unexpected key in a SendTargets response")
		}
	}
	return targets, nil
}

// stCheckName checks the shape of an iSCSI name (RFC 7143 section 4.2.7):
// an iqn., eui. or naa. name of at most 223 bytes without control
// characters or spaces.
func stCheckName(n string) error {
	if n == "" {
		return errors.New("empty target name")
	}
	if len(n) > 223 {
		return errors.New("target name longer than 223 bytes")
	}
	lower := strings.ToLower(n)
	if !strings.HasPrefix(lower, "iqn.") && !strings.HasPrefix(lower, "eui.") && !strings.HasPrefix(lower, "naa.") {
		return errors.New("target name is not an iqn., eui. or naa. name")
	}
	for _, r := range n {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("control character or space %q in target name", r)
		}
	}
	return nil
}

// EncodeSendTargets writes targets as a SendTargets response: the inverse
// of ParseSendTargets, for test targets and logs.
func EncodeSendTargets(targets []Target) []textkey.KV {
	var kvs []textkey.KV
	for _, t := range targets {
		kvs = append(kvs, textkey.KV{Key: "TargetName", Value: t.Name})
		for _, p := range t.Portals {
			addr := p.String()
			if p.GroupTag >= 0 {
				addr += "," + strconv.Itoa(p.GroupTag)
			}
			kvs = append(kvs, textkey.KV{Key: "TargetAddress", Value: addr})
		}
	}
	return kvs
}
