package blockdev

import (
	"context"
	"testing"
)

// disk is a leaf Backend with every capability; name tells implementers
// apart.
type disk struct{ name string }

func (disk) Size() int64                                                 { return 1 << 20 }
func (disk) BlockSize() uint32                                           { return 512 }
func (disk) PreferredBlockSize() uint32                                  { return 4096 }
func (disk) MaxTransfer() uint32                                         { return 0 }
func (disk) ReadOnly() bool                                              { return false }
func (disk) CanTrim() bool                                               { return false }
func (disk) CanWriteZeroes() bool                                        { return false }
func (disk) ReadAt(context.Context, []byte, int64) error                 { return nil }
func (disk) WriteAt(context.Context, []byte, int64, bool) error          { return nil }
func (disk) Flush(context.Context) error                                 { return nil }
func (disk) Trim(context.Context, int64, int64) error                    { return nil }
func (disk) WriteZeroes(context.Context, int64, int64, bool, bool) error { return nil }

type named interface{ Name() string }

type fullDisk struct{ disk }

func (d *fullDisk) Name() string                                 { return d.name }
func (d *fullDisk) StartRead([]byte, int64, Done, uint32)        {}
func (d *fullDisk) StartWrite([]byte, int64, bool, Done, uint32) {}
func (d *fullDisk) BeginBatch() Batch                            { return Batch{Held: d.name} }
func (d *fullDisk) EndBatch(Batch)                               {}
func (d *fullDisk) Reaper(func()) (Reaper, bool)                 { return nil, false }
func (d *fullDisk) IOBuffers(count, size int) ([][]byte, error)  { return make([][]byte, count), nil }

// plainDisk has no capability at all.
type plainDisk struct{ disk }

// bare is a wrapper that only implements Unwrap: a new wrapper written
// without a thought for the fast path.
type bare struct{ Backend }

func (w bare) Unwrap() Backend { return w.Backend }

// naming is a wrapper that implements one capability (Name) itself, as
// counting.Backend implements Async.
type naming struct {
	Backend
	name string
}

func (w naming) Unwrap() Backend { return w.Backend }
func (w naming) Name() string    { return w.name }

// opaque wraps without Unwrap: As cannot look through it.
type opaque struct{ Backend }

var (
	_ Async          = (*fullDisk)(nil)
	_ Batcher        = (*fullDisk)(nil)
	_ Reaping        = (*fullDisk)(nil)
	_ BufferProvider = (*fullDisk)(nil)
	_ Wrapper        = bare{}
	_ Wrapper        = naming{}
)

func TestAs(t *testing.T) {
	leaf := &fullDisk{disk{"leaf"}}
	for _, tc := range []struct {
		name string
		b    Backend
		want string // Name of the implementer As finds; "" none
	}{
		{"nil", nil, ""},
		{"0 wrappers, implements", leaf, "leaf"},
		{"0 wrappers, does not", &plainDisk{}, ""},
		{"1 wrapper without it", bare{leaf}, "leaf"},
		{"1 wrapper with it", naming{leaf, "outer"}, "outer"},
		{"1 wrapper, nothing below", bare{&plainDisk{}}, ""},
		{"2 wrappers without it", bare{bare{leaf}}, "leaf"},
		{"2 wrappers, the inner with it", bare{naming{leaf, "inner"}}, "inner"},
		{"2 wrappers with it: outermost wins", naming{naming{leaf, "inner"}, "outer"}, "outer"},
		{"2 wrappers, the outer with it", naming{bare{&plainDisk{}}, "outer"}, "outer"},
		{"opaque wrapper hides it", opaque{leaf}, ""},
		{"opaque below a wrapper hides it", bare{opaque{leaf}}, ""},
	} {
		n, ok := As[named](tc.b)
		got := ""
		if ok {
			got = n.Name()
		}
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: As = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

// TestAsThroughNewWrapper: a wrapper that implements nothing but Unwrap
// keeps every capability of the backend below reachable.
func TestAsThroughNewWrapper(t *testing.T) {
	leaf := &fullDisk{disk{"leaf"}}
	for depth, b := range []Backend{bare{leaf}, bare{bare{leaf}}} {
		if a, ok := As[Async](b); !ok || a != Async(leaf) {
			t.Errorf("depth %d: Async %v, %v", depth+1, a, ok)
		}
		if bt, ok := As[Batcher](b); !ok || bt.BeginBatch().Held != "leaf" {
			t.Errorf("depth %d: Batcher %v, %v", depth+1, bt, ok)
		}
		if r, ok := As[Reaping](b); !ok || r != Reaping(leaf) {
			t.Errorf("depth %d: Reaping %v, %v", depth+1, r, ok)
		}
		if bp, ok := As[BufferProvider](b); !ok {
			t.Errorf("depth %d: no BufferProvider", depth+1)
		} else if bufs, err := bp.IOBuffers(4, 4096); err != nil || len(bufs) != 4 {
			t.Errorf("depth %d: IOBuffers = %d, %v", depth+1, len(bufs), err)
		}
	}
	for _, b := range []Backend{&plainDisk{}, bare{&plainDisk{}}} {
		if _, ok := As[Async](b); ok {
			t.Errorf("%T: Async found on a backend without it", b)
		}
		if _, ok := As[BufferProvider](b); ok {
			t.Errorf("%T: BufferProvider found on a backend without it", b)
		}
	}
}
