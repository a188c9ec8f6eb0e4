package ublk

import (
	"errors"
	"strings"
	"testing"

	"github.com/iser-attach/iser-attach/blockdev"
)

type fixedPool struct {
	*memBackend
	bufs [][]byte
	err  error
}

func (f fixedPool) IOBuffers(count, size int) ([][]byte, error) { return f.bufs, f.err }

// unwrapping is a wrapper that forwards no capability, only Unwrap.
type unwrapping struct{ Backend }

func (w unwrapping) Unwrap() Backend { return w.Backend }

var (
	_ blockdev.BufferProvider = fixedPool{}
	_ blockdev.Wrapper        = unwrapping{}
)

func TestIOBuffers(t *testing.T) {
	m := newMemBackend(1<<20, 512)
	own, err := newIOBuffers(m, 4, 8192)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range own.bufs {
		if len(b) != 8192 || cap(b) != 8192 || uintptrOf(b)%4096 != 0 {
			t.Errorf("buffer %d: len %d cap %d addr %#x", i, len(b), cap(b), uintptrOf(b))
		}
	}
	own.free()
	own.free() // idempotent

	good := [][]byte{make([]byte, 8192), make([]byte, 9000)}
	if got, err := newIOBuffers(fixedPool{m, good, nil}, 2, 8192); err != nil || &got.bufs[1][0] != &good[1][0] {
		t.Fatalf("provided buffers not used: %v", err)
	}
	// Found through a wrapper that only unwraps.
	if got, err := newIOBuffers(unwrapping{fixedPool{m, good, nil}}, 2, 8192); err != nil || &got.bufs[1][0] != &good[1][0] {
		t.Fatalf("provided buffers behind a wrapper not used: %v", err)
	}
	// A provider with none to give (an initiator.LUN over TCP): our own.
	none, err := newIOBuffers(unwrapping{fixedPool{m, nil, nil}}, 2, 8192)
	if err != nil || len(none.bufs) != 2 || none.mem == nil {
		t.Fatalf("no provided buffers: %v, want our own mapping", err)
	}
	none.free()
	for _, tc := range []struct {
		p    fixedPool
		want string
	}{
		{fixedPool{m, good[:1], nil}, "gave 1 buffers"},
		{fixedPool{m, [][]byte{make([]byte, 8192), make([]byte, 100)}, nil}, "buffer 1 has 100 bytes"},
		{fixedPool{m, nil, errors.New("pool exhausted")}, "pool exhausted"},
	} {
		if _, err := newIOBuffers(tc.p, 2, 8192); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}
