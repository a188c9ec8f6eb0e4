package ublk

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/blockdev"
)

// fakeReaping hands out fakeReapers on eventfds.
type fakeReaping struct {
	given    []*fakeReaper
	revoked  func()
	refusing bool
}

func (f *fakeReaping) Reaper(revoked func()) (blockdev.Reaper, bool) {
	if f.refusing {
		return nil, false
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		panic(err)
	}
	r := &fakeReaper{fd: fd}
	f.given = append(f.given, r)
	f.revoked = revoked
	return r, true
}

type fakeReaper struct {
	fd       int
	reaps    int
	released int
}

func (r *fakeReaper) Fd() int { return r.fd }
func (r *fakeReaper) Reap() bool {
	var buf [8]byte
	_, _ = unix.Read(r.fd, buf[:])
	r.reaps++
	return true
}
func (r *fakeReaper) Release() { r.released++ }

func (r *fakeReaper) signal() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(r.fd, one[:])
}

// next waits for the ring's next completion.
func next(t *testing.T, r *ring) cqe {
	t.Helper()
	if err := r.enter(1, 0); err != nil {
		t.Fatal(err)
	}
	e, ok := r.peek()
	if !ok {
		t.Fatal("no completion")
	}
	r.advance()
	return e
}

// A loop's hold on its backend's completions, on a real ring: the
// reaper's descriptor is polled under its generation, a completion of
// the current poll fires once, dropping a held reaper removes its armed
// poll (whose cancelled completion, and any of an older generation, no
// longer fires) and releases it, and a revoke sets the flag and wakes the
// loop.
func TestReapStatePollsAndDrops(t *testing.T) {
	r, err := newRing(8, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	src := &fakeReaping{}
	woken := 0
	rs := reapState{src: src, wake: func() { woken++ }}

	if !rs.take(r) || rs.rp == nil || !rs.armed || len(src.given) != 1 {
		t.Fatalf("take: reaper %v armed %v", rs.rp, rs.armed)
	}
	first := src.given[0]
	if rs.take(r) { // holds one already: no second
		t.Fatal("take took a second reaper")
	}
	if len(src.given) != 1 {
		t.Fatal("take asked for a second reaper while holding one")
	}
	first.signal()
	e := next(t, r)
	if e.UserData&kindMask != reapTag || !rs.fired(e.UserData) || rs.armed {
		t.Fatalf("completion %+v: not the reaper's poll firing", e)
	}
	if !rs.rp.Reap() {
		t.Fatal("reap")
	}
	rs.arm(r)

	rs.drop(r) // armed: the poll is removed
	if rs.rp != nil || first.released != 1 {
		t.Fatalf("drop: reaper %v, released %d", rs.rp, first.released)
	}
	seen := map[uint64]int32{}
	for range 2 {
		e := next(t, r)
		seen[e.UserData&kindMask] = e.Res
		if e.UserData&kindMask == reapTag && rs.fired(e.UserData) {
			t.Fatal("the removed poll's completion fired")
		}
	}
	if seen[reapTag] != -int32(syscall.ECANCELED) || seen[removeTag] != 0 {
		t.Fatalf("after drop: completions %v, want the poll cancelled and the remove done", seen)
	}

	if !rs.take(r) { // the next one, a new generation
		t.Fatal("take")
	}
	second := src.given[1]
	if uint32(reapTag|uint64(rs.gen)) == uint32(reapTag|uint64(rs.gen-1)) || rs.rp != second {
		t.Fatal("the next reaper shares the generation")
	}
	if rs.fired(reapTag | uint64(rs.gen-1)) {
		t.Fatal("a completion of the older generation fired")
	}
	src.revoked()
	if !rs.revoked.Load() || woken != 1 {
		t.Fatalf("revoke: flag %v, wakes %d", rs.revoked.Load(), woken)
	}
	second.signal()
	if e := next(t, r); !rs.fired(e.UserData) {
		t.Fatalf("completion %+v: the second reaper's poll did not fire", e)
	}
	rs.drop(r) // not armed: nothing to remove
	if second.released != 1 || r.pending() != 0 {
		t.Fatalf("drop unarmed: released %d, %d SQEs queued", second.released, r.pending())
	}

	src.refusing = true
	if rs.take(r) {
		t.Fatal("take reported a reaper the source refused")
	}
	if rs.rp != nil || r.pending() != 0 {
		t.Fatal("take kept a reaper the source refused")
	}
	for _, g := range src.given {
		unix.Close(g.fd)
	}
}
