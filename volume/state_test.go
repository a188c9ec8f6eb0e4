package volume

import (
	"errors"
	"strings"
	"testing"
)

func TestStateRecordsIdentity(t *testing.T) {
	tempRunDir(t)
	id := Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 64 << 20, BlockSize: 512, Target: "iqn.2026-11.test:db", Number: 0}
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
	const tgt = "iqn.2026-11.test:db"
	rec := Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 64 << 20, BlockSize: 512, Target: tgt, Number: 1}
	for _, tc := range []struct {
		name string
		rec  Identity
		got  Identity
		want string // in the error; "" for a match
	}{
		{"same", rec, rec, ""},
		{"other WWN", rec, Identity{WWN: "naa.6001405def", Serial: "beaf11", Size: 64 << 20, BlockSize: 512, Target: tgt, Number: 1}, `WWN "naa.6001405abc", this LUN "naa.6001405def"`},
		{"no WWN now", rec, Identity{Serial: "beaf11", Size: 64 << 20, BlockSize: 512, Target: tgt, Number: 1}, `WWN "naa.6001405abc", this LUN ""`},
		{"other serial", rec, Identity{WWN: "naa.6001405abc", Serial: "beaf12", Size: 64 << 20, BlockSize: 512, Target: tgt, Number: 1}, `serial "beaf11", this LUN "beaf12"`},
		{"other size", rec, Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 32 << 20, BlockSize: 512, Target: tgt, Number: 1}, "size 67108864, this LUN 33554432"},
		{"other block size", rec, Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 64 << 20, BlockSize: 4096, Target: tgt, Number: 1}, "block size 512, this LUN 4096"},
		{"other target", rec, Identity{WWN: "naa.6001405abc", Serial: "beaf11", Size: 64 << 20, BlockSize: 512, Target: tgt + "2", Number: 1}, tgt + " LUN 1, this LUN " + tgt + "2 LUN 1"},
		// Without a WWN or serial, size and block size still count.
		{"size only", Identity{Size: 1 << 20, BlockSize: 512, Target: tgt}, Identity{WWN: "naa.1", Size: 2 << 20, BlockSize: 512, Target: tgt}, "size 1048576, this LUN 2097152"},
		// ... but never alone: the target and LUN number must match too.
		{"no WWN or serial, same target and LUN", Identity{Size: 1 << 20, BlockSize: 512, Target: tgt, Number: 2},
			Identity{Size: 1 << 20, BlockSize: 512, Target: tgt, Number: 2}, ""},
		{"no WWN or serial, other target", Identity{Size: 1 << 20, BlockSize: 512, Target: tgt, Number: 2},
			Identity{Size: 1 << 20, BlockSize: 512, Target: "iqn.2026-11.test:other", Number: 2}, tgt + " LUN 2, this LUN iqn.2026-11.test:other LUN 2"},
		{"no WWN or serial, other LUN", Identity{Size: 1 << 20, BlockSize: 512, Target: tgt, Number: 2},
			Identity{Size: 1 << 20, BlockSize: 512, Target: tgt, Number: 0}, tgt + " LUN 2, this LUN " + tgt + " LUN 0"},
	} {
		err := tc.rec.Check(tc.got)
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
	// A record that says nothing but size and block size (or nothing at
	// all: a state file from before identities) identifies no LUN.
	for _, r := range []Identity{{Size: 1 << 20, BlockSize: 512}, {}} {
		if err := r.Check(Identity{Size: 1 << 20, BlockSize: 512, Target: tgt}); !errors.Is(err, ErrUnidentified) {
			t.Errorf("record %+v: %v, want ErrUnidentified", r, err)
		}
	}
}
