package rawwait

import "testing"

// GODEBUG is read as the runtime reads it: a comma-separated list, the
// last setting of a key wins, the environment's after the binary's
// defaults; values that are not numbers are ignored.
func TestAsyncPreemptOff(t *testing.T) {
	for _, c := range []struct {
		lists []string
		off   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"asyncpreemptoff=1"}, true},
		{[]string{"gctrace=1,asyncpreemptoff=1,madvdontneed=0"}, true},
		{[]string{"asyncpreemptoff=1,asyncpreemptoff=0"}, false},
		{[]string{"asyncpreemptoff=0,asyncpreemptoff=1"}, true},
		{[]string{"asyncpreemptoff=2"}, true},
		{[]string{"asyncpreemptoff=1,asyncpreemptoff=yes"}, true},
		{[]string{"asyncpreemptoff=yes"}, false},
		{[]string{"asyncpreemptoff"}, false},
		{[]string{"xasyncpreemptoff=1"}, false},
		{[]string{"asyncpreemptoff=1", ""}, true},
		{[]string{"asyncpreemptoff=1", "asyncpreemptoff=0"}, false},
		{[]string{"", "asyncpreemptoff=1"}, true},
		{[]string{"gccheckmark=1"}, true},
		{[]string{",,asyncpreemptoff=1,"}, true},
	} {
		if got := asyncPreemptOff(c.lists...); got != c.off {
			t.Errorf("GODEBUG %q: asynchronous preemption off %v, want %v", c.lists, got, c.off)
		}
	}
}

// Take, the path a busy loop runs on every pass, allocates nothing.
func TestTakeAllocatesNothing(t *testing.T) {
	var s Slots
	var h Slot
	if n := testing.AllocsPerRun(1000, func() {
		s.Take(&h)
		s.Take(&h)
		s.Give(&h)
	}); n != 0 {
		t.Fatalf("%v allocations per take", n)
	}
}

// BenchmarkTakeHeld is a busy loop's pass: it holds its slot and takes
// again (GOMAXPROCS is read each time).
func BenchmarkTakeHeld(b *testing.B) {
	var s Slots
	var h Slot
	s.Take(&h)
	b.ReportAllocs()
	for b.Loop() {
		s.Take(&h)
	}
}

// BenchmarkTakeHeldParallel: every P's loop takes at once.
func BenchmarkTakeHeldParallel(b *testing.B) {
	var s Slots
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var h Slot
		for pb.Next() {
			s.Take(&h)
		}
	})
}
