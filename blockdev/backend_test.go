package blockdev

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
)

type senseErr struct{ en syscall.Errno }

func (e senseErr) Error() string        { return "sense" }
func (e senseErr) Errno() syscall.Errno { return e.en }

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		en   syscall.Errno
		ok   bool
	}{
		{"nil", nil, 0, false},
		{"plain", io.ErrUnexpectedEOF, 0, false},
		{"errno", syscall.ENOSPC, syscall.ENOSPC, true},
		{"wrapped errno", fmt.Errorf("write: %w", syscall.EROFS), syscall.EROFS, true},
		{"errnoer", fmt.Errorf("read: %w", senseErr{syscall.EILSEQ}), syscall.EILSEQ, true},
		{"errnoer alone", senseErr{syscall.ENODATA}, syscall.ENODATA, true},
		// A syscall.Errno in the chain wins over an Errnoer.
		{"errno and errnoer", errors.Join(syscall.ETIMEDOUT, senseErr{syscall.EILSEQ}), syscall.ETIMEDOUT, true},
		{"errnoer without errno", errors.Join(io.EOF, senseErr{syscall.EBADE}), syscall.EBADE, true},
	} {
		en, ok := Errno(tc.err)
		if en != tc.en || ok != tc.ok {
			t.Errorf("%s: Errno(%v) = %v, %v; want %v, %v", tc.name, tc.err, en, ok, tc.en, tc.ok)
		}
	}
}
