package initiator

import (
	"fmt"
	"testing"
)

// pickLab is a Multipath of n paths, each up (a session that is never
// used) and active/optimized, without a target: only pick runs on it.
func pickLab(n int, sel PathSelector) *Multipath {
	m := &Multipath{cfg: MultipathConfig{Selector: sel}}
	for i := range n {
		nx := &Nexus{}
		nx.up.Store(&Session{})
		p := &mpath{m: m, idx: i, portal: fmt.Sprint("path", i)}
		p.access.Store(accessUnknown)
		p.nx.Store(nx)
		m.paths = append(m.paths, p)
	}
	return m
}

// BenchmarkMultipathPick: the path choice of every command, for each
// selector over two and four optimized paths with commands in flight (a
// command is counted on its path while the next ones are chosen). It
// must allocate nothing.
func BenchmarkMultipathPick(b *testing.B) {
	for _, sel := range []PathSelector{SelectRoundRobin, SelectQueueLength} {
		for _, n := range []int{2, 4} {
			b.Run(fmt.Sprintf("%v/paths=%d", sel, n), func(b *testing.B) {
				m := pickLab(n, sel)
				const depth = 32
				var ring [depth]*mpath
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if old := ring[i%depth]; old != nil {
						old.inflight.Add(-1)
					}
					p := m.pick()
					p.inflight.Add(1)
					ring[i%depth] = p
				}
			})
		}
	}
}

// TestMultipathPickQueueLength: queue-length takes the optimized path
// with the fewest commands in flight, in turn among equals, and a
// non-optimized one only when no optimized path is usable, the least
// busy of those.
func TestMultipathPickQueueLength(t *testing.T) {
	m := pickLab(3, SelectQueueLength)
	m.paths[0].inflight.Store(3)
	m.paths[1].inflight.Store(1)
	m.paths[2].inflight.Store(1)
	seen := map[int]int{}
	for range 10 {
		seen[m.pick().idx]++
	}
	if seen[0] != 0 || seen[1] != 5 || seen[2] != 5 {
		t.Errorf("picks %v: want paths 1 and 2 in turn, never the busiest path 0", seen)
	}
	m.paths[1].access.Store(1) // active/non-optimized
	m.paths[2].access.Store(2) // standby
	m.paths[0].access.Store(1)
	for range 4 {
		if p := m.pick(); p.idx != 1 {
			t.Fatalf("picked path %d: want 1, the non-optimized one with fewer in flight", p.idx)
		}
	}
	m.paths[2].access.Store(0) // optimized again: it wins despite its queue
	m.paths[2].inflight.Store(9)
	if p := m.pick(); p.idx != 2 {
		t.Fatalf("picked path %d: want 2, the only optimized one", p.idx)
	}
	m.paths[2].access.Store(3) // unavailable
	m.paths[0].access.Store(3)
	m.paths[1].access.Store(3)
	if p := m.pick(); p != nil {
		t.Fatalf("picked path %d with none usable", p.idx)
	}
}
