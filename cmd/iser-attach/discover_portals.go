package main

import (
	"fmt"

	"github.com/iser-attach/iser-attach/discovery"
)

// discoveryPortals reads discover's portals: the PORTAL argument, or one
// or more --portal flags; both only when they name the same portal. They
// come back as host:port, each once, in the order given.
func discoveryPortals(args, flags []string) ([]string, error) {
	if len(args) > 1 {
		return nil, fmt.Errorf("expected at most one PORTAL argument, got %d (repeat --portal for more)", len(args))
	}
	var out []string
	seen := map[string]bool{}
	for _, p := range flags {
		addr, _, err := portalAddr(p)
		if err != nil {
			return nil, err
		}
		if !seen[addr] {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	if len(args) == 1 {
		addr, _, err := portalAddr(args[0])
		if err != nil {
			return nil, err
		}
		if len(flags) > 0 && (len(out) != 1 || out[0] != addr) {
			return nil, fmt.Errorf("PORTAL %s and --portal %s differ: give one or the other", args[0], flags[0])
		}
		out = []string{addr}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no portal: give PORTAL or --portal")
	}
	return out, nil
}

// withDiscoveryPortal gives a target that reported no TargetAddress the
// portal it was discovered on, where it is reached (RFC 7143 section
// 12.3).
func withDiscoveryPortal(targets []discovery.Target, addr string) []discovery.Target {
	p, err := discovery.ParsePortal(addr)
	if err != nil {
		return targets
	}
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
