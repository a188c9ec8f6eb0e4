package volume

import (
	"errors"
	"strings"
	"testing"
)

func TestStateRecordsIdentity(t *testing.T) {
	tempRunDir(t)
	id := Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 64 << 20, BlockSize: 512}
	if err := WriteState("db", State{Frontend: "ublk", ID: 3, Device: "/dev/ublkb3", PID: 99, LUN: id}); err != nil {
		t.Fatal(err)
	}
	st, ok := ReadState("db")
	if !ok || st.LUN != id || st.ID != 3 || st.PID != 99 {
		t.Fatalf("read back %+v %v", st, ok)
	}
	if err := st.LUN.Check(id); err != nil {
		t.Fatalf("same LUN: %v", err)
	}
}

func TestIdentityCheck(t *testing.T) {
	rec := Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 64 << 20, BlockSize: 512}
	for _, tc := range []struct {
		name string
		got  Identity
		want string // in the error; "" for a match
	}{
		{"same", rec, ""},
		{"other WWN", Identity{WWN: "naa.6001405def", Serial: "beaf11", Size: 64 << 20, BlockSize: 512}, `WWN "naa.6001405abc", this LUN "naa.6001405def"`},
		{"no WWN now", Identity{Serial: "beaf11", Size: 64 << 20, BlockSize: 512}, `WWN "naa.6001405abc", this LUN ""`},
		{"other serial", Identity{WWN: "naa.6001405abc", Serial: "beaf12", Size: 64 << 20, BlockSize: 512}, `serial "beaf11", this LUN "beaf12"`},
		{"other size", Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 32 << 20, BlockSize: 512}, "size 67108864, this LUN 33554432"},
		{"other block size", Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 64 << 20, BlockSize: 4096}, "block size 512, this LUN 4096"},
	} {
		err := rec.Check(tc.got)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrOtherLUN) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrOtherLUN with %q", tc.name, err, tc.want)
		}
	}
	// Without a WWN or serial recorded, size and block size still count.
	if err := (Identity{Size: 1 << 20, BlockSize: 512}).Check(Identity{WWN: "naa.1", Size: 2 << 20, BlockSize: 512}); !errors.Is(err, ErrOtherLUN) {
		t.Errorf("size only: %v", err)
	}
	// A state file from before identities were recorded checks nothing.
	if (Identity{}).Known() || !rec.Known() {
		t.Error("Known")
	}
	if err := (Identity{}).Check(rec); err != nil {
		t.Errorf("unknown identity: %v", err)
	}
}
