package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/ublk"
	"github.com/iser-attach/iser-attach/volume"
)

// fakeDev is a frontend device; with resizable it implements
// resizableDevice, canErr being its CanResize.
type fakeDev struct {
	path    string
	canErr  error
	resized []int64
}

func (f *fakeDev) Path() string                     { return f.path }
func (f *fakeDev) Detach(ctx context.Context) error { return nil }

type fakeResizable struct{ *fakeDev }

func (f fakeResizable) CanResize() error { return f.canErr }
func (f fakeResizable) Resize(ctx context.Context, size int64) error {
	f.resized = append(f.resized, size)
	return nil
}

type fakeRescan struct {
	n        int
	from, to int64
}

func (f *fakeRescan) rescan(ctx context.Context) (int64, int64, error) {
	f.n++
	return f.from, f.to, nil
}

// resize: the LUN read again and the device set to its new size; refused
// in one line, before the LUN is read, by a frontend that cannot resize
// (nbd) or a kernel without UBLK_F_UPDATE_SIZE.
func TestResizeVolume(t *testing.T) {
	ctx := t.Context()
	rs := &fakeRescan{from: 1 << 30, to: 3 << 30}
	nbdDev := &fakeDev{path: "/dev/nbd0"}
	if _, err := (resizer{rescan: rs.rescan, dev: nbdDev}).resize(ctx); err == nil ||
		err.Error() != "the frontend cannot change the device's size (only ublk can)" || rs.n != 0 {
		t.Fatalf("nbd: %v, %d rescans", err, rs.n)
	}
	old := fakeResizable{&fakeDev{path: "/dev/ublkb0", canErr: ublk.ErrNoResize}}
	_, err := (resizer{rescan: rs.rescan, dev: old}).resize(ctx)
	if err == nil || err.Error() != "ublk: kernel lacks UBLK_F_UPDATE_SIZE (needs Linux >= 6.16)" || rs.n != 0 {
		t.Fatalf("without UPDATE_SIZE: %v, %d rescans", err, rs.n)
	}
	dev := fakeResizable{&fakeDev{path: "/dev/ublkb1"}}
	res, err := (resizer{rescan: rs.rescan, dev: dev}).resize(ctx)
	if err != nil || res.OldSize != 1<<30 || res.NewSize != 3<<30 || res.Device != "/dev/ublkb1" ||
		fmt.Sprint(dev.resized) != fmt.Sprint([]int64{3 << 30}) {
		t.Fatalf("resize: %+v %v, device resized to %v", res, err, dev.resized)
	}
}

// A capacity change the LUN noticed (UNIT ATTENTION 2A/09) resizes the
// device; a device that cannot resize keeps its size (a warning).
func TestFollowCapacity(t *testing.T) {
	var f initiator.CapacityFunc
	register := func(g initiator.CapacityFunc) { f = g }
	dev := fakeResizable{&fakeDev{path: "/dev/ublkb2"}}
	resizer{dev: dev}.followCapacity(register, "vol")
	if f == nil {
		t.Fatal("no capacity callback registered")
	}
	f(1<<30, 5<<30)
	if fmt.Sprint(dev.resized) != fmt.Sprint([]int64{5 << 30}) {
		t.Fatalf("device resized to %v", dev.resized)
	}
	old := fakeResizable{&fakeDev{path: "/dev/ublkb3", canErr: ublk.ErrNoResize}}
	resizer{dev: old}.followCapacity(register, "vol")
	f(1<<30, 5<<30)
	if len(old.resized) != 0 {
		t.Fatalf("resized without UPDATE_SIZE: %v", old.resized)
	}
	if !errors.Is(old.canErr, ublk.ErrNoResize) || !strings.Contains(old.canErr.Error(), "6.16") {
		t.Fatal(old.canErr)
	}
}

// After a resize the state file records the new size: the next attach's
// takeover checks the LUN's size against it.
func TestRecordSize(t *testing.T) {
	old := volume.RunDir
	volume.RunDir = t.TempDir()
	t.Cleanup(func() { volume.RunDir = old })
	if err := recordSize("none", 1<<30); err != nil {
		t.Fatalf("no state file: %v", err)
	}
	id := volume.Identity{WWN: "naa.1", Size: 1 << 30, BlockSize: 512, Target: "iqn.t", Number: 0}
	if err := volume.WriteState("v", volume.State{Frontend: "ublk", ID: 4, Device: "/dev/ublkb4", LUN: id}); err != nil {
		t.Fatal(err)
	}
	if err := recordSize("v", 3<<30); err != nil {
		t.Fatal(err)
	}
	st, ok := volume.ReadState("v")
	grown := id
	grown.Size = 3 << 30
	if !ok || st.LUN != grown || st.ID != 4 || st.LUN.Check(grown) != nil {
		t.Fatalf("state after resize: %+v", st)
	}
}

type fakeSafeStop struct {
	*fakeDev
	err     error
	calls   int
	without bool // the kernel lacks the feature
}

func (f *fakeSafeStop) SafeStop() bool { return !f.without }

func (f *fakeSafeStop) StopIfUnused(ctx context.Context) error {
	f.calls++
	return f.err
}

// A detach without --force, or a signal, lets the kernel refuse to stop a
// device opened at the last moment (UBLK_F_SAFE_STOP_DEV); --force and
// devices or kernels without it skip the kernel's check; any other failure
// is left to the removal that follows.
func TestStopIfUnused(t *testing.T) {
	open := &fakeSafeStop{fakeDev: &fakeDev{path: "/dev/ublkb0"}, err: fmt.Errorf("ublk stop: %w", ublk.ErrOpen)}
	a := &attached{dev: open}
	if err := a.stopIfUnused(&detachReq{}); !errors.Is(err, ublk.ErrOpen) || open.calls != 1 {
		t.Fatalf("detach of an open device: %v, %d calls", err, open.calls)
	}
	if err := a.stopIfUnused(nil); !errors.Is(err, ublk.ErrOpen) || open.calls != 2 {
		t.Fatalf("signal with an open device: %v", err)
	}
	if err := a.stopIfUnused(&detachReq{force: true}); err != nil || open.calls != 2 {
		t.Fatalf("forced detach: %v, %d calls", err, open.calls)
	}
	open.err = errors.New("ublk stop: control closed")
	if err := a.stopIfUnused(&detachReq{}); err != nil {
		t.Fatalf("other failure: %v", err)
	}
	if err := (&attached{dev: &fakeDev{path: "/dev/nbd0"}}).stopIfUnused(&detachReq{}); err != nil {
		t.Fatalf("nbd: %v", err)
	}
	// ublk without UBLK_F_SAFE_STOP_DEV (6.12): not called, the removal
	// stays where it was (detachVolume).
	old := &fakeSafeStop{fakeDev: &fakeDev{path: "/dev/ublkb1"}, without: true}
	if err := (&attached{dev: old}).stopIfUnused(&detachReq{}); err != nil || old.calls != 0 {
		t.Fatalf("without the feature: %v, %d calls", err, old.calls)
	}
}
