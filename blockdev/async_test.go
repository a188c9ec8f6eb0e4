package blockdev

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	stop := errors.New("stop")
	for _, tc := range []struct {
		n, max  int
		failAt  int64 // offset whose piece fails; -1 none
		pieces  []string
		wantErr bool
	}{
		{n: 10, max: 0, failAt: -1, pieces: []string{"100+10"}},
		{n: 10, max: 4, failAt: -1, pieces: []string{"100+4", "104+4", "108+2"}},
		{n: 8, max: 4, failAt: -1, pieces: []string{"100+4", "104+4"}},
		{n: 8, max: 16, failAt: -1, pieces: []string{"100+8"}},
		{n: 12, max: 4, failAt: 104, pieces: []string{"100+4", "104+4"}, wantErr: true},
		{n: 0, max: 4, failAt: -1},
	} {
		var got []string
		err := Split(make([]byte, tc.n), 100, tc.max, func(p []byte, off int64) error {
			got = append(got, fmt.Sprintf("%d+%d", off, len(p)))
			if off == tc.failAt {
				return stop
			}
			return nil
		})
		if !reflect.DeepEqual(got, tc.pieces) || errors.Is(err, stop) != tc.wantErr {
			t.Errorf("Split(%d bytes, max %d): pieces %v err %v; want %v err %v", tc.n, tc.max, got, err, tc.pieces, tc.wantErr)
		}
	}
}
