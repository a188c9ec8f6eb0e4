package main

import (
	"fmt"

	"github.com/iser-attach/iser-attach/discovery"
)

// discoveryPortal is one portal discover asks: host:port, and the portal
// group tag given with it (host:port,TPGT as iscsiadm prints it), or -1.
type discoveryPortal struct {
	addr string
	tag  int
}

// discoveryPortals reads discover's portals: the PORTAL argument, or one
// or more --portal flags; both only when they name the same portal. They
// come back as host:port, each once, in the order given, with the tag
// given for them.
func discoveryPortals(args, flags []string) ([]discoveryPortal, error) {
	if len(args) > 1 {
		return nil, fmt.Errorf("expected at most one PORTAL argument, got %d (repeat --portal for more)", len(args))
	}
	var out []discoveryPortal
	seen := map[string]bool{}
	for _, p := range flags {
		addr, tag, err := portalAddr(p)
		if err != nil {
			return nil, err
		}
		if !seen[addr] {
			seen[addr] = true
			out = append(out, discoveryPortal{addr, tag})
		}
	}
	if len(args) == 1 {
		addr, tag, err := portalAddr(args[0])
		if err != nil {
			return nil, err
		}
		if len(flags) > 0 && (len(out) != 1 || out[0].addr != addr) {
			return nil, fmt.Errorf("PORTAL %s and --portal %s differ: give one or the other", args[0], flags[0])
		}
		out = []discoveryPortal{{addr, tag}}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no portal: give PORTAL or --portal")
	}
	return out, nil
}

// tagMismatch checks the portal group tag given with a discovery portal
// against the target's answer: where a target lists that portal with
// another tag, it says so (the tag a later attach checks would be
// refused); "" when the tag was not given, agrees, or the answer does not
// list the portal.
func tagMismatch(targets []discovery.Target, dp discoveryPortal) string {
	if dp.tag < 0 {
		return ""
	}
	for _, t := range targets {
		for _, p := range t.Portals {
			q := p
			q.GroupTag = -1
			if q.String() == dp.addr && p.GroupTag >= 0 && p.GroupTag != dp.tag {
				return fmt.Sprintf("portal %s,%d: target %s lists it in portal group %d", dp.addr, dp.tag, t.Name, p.GroupTag)
			}
		}
	}
	return ""
}

// withDiscoveryPortal gives a target that reported no TargetAddress the
// portal it was discovered on, where it is reached (RFC 7143 section
// 12.3), with the tag given for it.
func withDiscoveryPortal(targets []discovery.Target, dp discoveryPortal) []discovery.Target {
	p, err := discovery.ParsePortal(dp.addr)
	if err != nil {
		return targets
	}
	p.GroupTag = dp.tag
	for i := range targets {
		if len(targets[i].Portals) == 0 {
			targets[i].Portals = []discovery.Portal{p}
		}
	}
	return targets
}

// mergeTargets joins the targets discovered on several portals: each
// target once, in the order first seen, with every portal reported for it.
func mergeTargets(lists [][]discovery.Target) []discovery.Target {
	var out []discovery.Target
	index := map[string]int{}
	for _, list := range lists {
		for _, t := range list {
			i, ok := index[t.Name]
			if !ok {
				index[t.Name] = len(out)
				out = append(out, discovery.Target{Name: t.Name})
				i = len(out) - 1
			}
			for _, p := range t.Portals {
				dup := false
				for _, q := range out[i].Portals {
					dup = dup || q == p
				}
				if !dup {
					out[i].Portals = append(out[i].Portals, p)
				}
			}
		}
	}
	return out
}
