package ublk

import (
	"errors"
	"strings"
	"testing"
)

type fixedPool struct {
	*memBackend
	bufs [][]byte
	err  error
}

func (f fixedPool) IOBuffers(count, size int) ([][]byte, error) { return f.bufs, f.err }

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
