package ublk

import "testing"

// Raw waits are handed out while they leave the process a P: with
// GOMAXPROCS 3, two loops get one, a third waits the usual way until one
// of them gives its slot back; taking twice or giving twice counts once.
func TestRawWaitSlotsLeaveOneP(t *testing.T) {
	var s rawWaitSlots
	s.procs.Store(3)
	rings := make([]*ring, 3)
	for i := range rings {
		rings[i] = &ring{}
		s.take(rings[i])
		s.take(rings[i])
	}
	if !rings[0].rawWait || !rings[1].rawWait || rings[2].rawWait || s.used.Load() != 2 {
		t.Fatalf("raw waits %v %v %v, %d used; want the first two", rings[0].rawWait, rings[1].rawWait, rings[2].rawWait, s.used.Load())
	}
	s.give(rings[0])
	s.give(rings[0])
	s.take(rings[2])
	if rings[0].rawWait || !rings[2].rawWait || s.used.Load() != 2 {
		t.Fatalf("after a give: %v %v, %d used", rings[0].rawWait, rings[2].rawWait, s.used.Load())
	}
	var one rawWaitSlots
	one.procs.Store(1)
	r := &ring{}
	if one.take(r); r.rawWait {
		t.Fatal("GOMAXPROCS 1: a loop took the only P")
	}
}
