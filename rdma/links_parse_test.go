package rdma

import (
	"encoding/binary"
	"errors"
	"testing"
)

// attr encodes one netlink attribute with its padding.
func attr(typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(b[0:2], uint16(l))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	copy(b[4:], data)
	return b
}

func u32(v uint32) []byte { b := make([]byte, 4); binary.NativeEndian.PutUint32(b, v); return b }
func u64(v uint64) []byte { b := make([]byte, 8); binary.NativeEndian.PutUint64(b, v); return b }
func str(s string) []byte { return append([]byte(s), 0) }

func msg(attrs ...[]byte) []byte {
	var b []byte
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

func TestParseLinks(t *testing.T) {
	devs := [][]byte{
		msg(attr(attrDevIndex, u32(1)), attr(attrDevName, str("rxe0")), attr(0, u32(0)), // PAD
			attr(attrNodeGUID, u64(0x505400fffe123456))),
		msg(attr(attrDevIndex, u32(0)), attr(attrDevName, str("mlx5_0")), attr(attrNodeGUID, u64(0x0c42a10300b2c3d4))),
	}
	ports := [][]byte{
		msg(attr(attrDevIndex, u32(1)), attr(attrDevName, str("rxe0")), attr(attrPortIndex, u32(1)),
			attr(attrPortState, []byte{4}), attr(attrPortPhysState, []byte{5}),
			attr(attrNDevIndex, u32(7)), attr(attrNDevName, str("rxe-net0"))),
		msg(attr(attrDevIndex, u32(0)), attr(attrDevName, str("mlx5_0")), attr(attrPortIndex, u32(1)),
			attr(attrPortState, []byte{1}), attr(attrPortPhysState, []byte{3}),
			attr(0x8000|99, []byte{1, 2, 3})), // unknown nested attribute: ignored
	}
	if idx, err := deviceIndexes(devs); err != nil || len(idx) != 2 || idx[0] != 1 || idx[1] != 0 {
		t.Fatalf("deviceIndexes = %v, %v", idx, err)
	}
	if _, err := deviceIndexes([][]byte{msg(attr(attrDevName, str("x")))}); !errors.Is(err, errAttr) {
		t.Fatalf("deviceIndexes without index: %v", err)
	}
	links, err := parseLinks(devs, ports)
	if err != nil {
		t.Fatal(err)
	}
	want := []Link{
		{Device: "mlx5_0", DeviceIndex: 0, Port: 1, NodeGUID: "0c42:a103:00b2:c3d4", State: "DOWN", PhysState: "DISABLED"},
		{Device: "rxe0", DeviceIndex: 1, Port: 1, NodeGUID: "5054:00ff:fe12:3456", State: "ACTIVE", PhysState: "LINK_UP", NetDev: "rxe-net0", NetDevIndex: 7},
	}
	if len(links) != len(want) {
		t.Fatalf("got %d links, want %d: %+v", len(links), len(want), links)
	}
	for i := range want {
		if links[i] != want[i] {
			t.Errorf("link %d:\n got %+v\nwant %+v", i, links[i], want[i])
		}
	}
	if l, ok := pickLink(links, 7); !ok || l.Device != "rxe0" {
		t.Errorf("pickLink(7) = %+v, %v", l, ok)
	}
	if _, ok := pickLink(links, 0); ok {
		t.Errorf("pickLink(0) matched a port without netdev")
	}
	if _, ok := pickLink(links, 8); ok {
		t.Errorf("pickLink(8) matched")
	}
}

func TestParseLinksMalformed(t *testing.T) {
	good := attr(attrDevName, str("rxe0"))
	for name, ports := range map[string][]byte{
		"short header":     {1, 0},
		"length too small": {2, 0, 2, 0},
		"length overflows": append(append([]byte{}, good...), 40, 0, 3, 0, 1, 2, 3, 4),
		"u32 of 2 bytes":   msg(good, attr(attrPortIndex, []byte{1, 0})),
		"u8 of 4 bytes":    msg(good, attr(attrPortState, u32(4))),
		"no device name":   msg(attr(attrPortIndex, u32(1))),
	} {
		if _, err := parseLinks(nil, [][]byte{ports}); !errors.Is(err, errAttr) {
			t.Errorf("%s: got %v, want errAttr", name, err)
		}
	}
	if _, err := parseLinks([][]byte{msg(attr(attrNodeGUID, u32(1)))}, nil); !errors.Is(err, errAttr) {
		t.Errorf("short GUID: got %v, want errAttr", err)
	}
}

func FuzzParseAttrs(f *testing.F) {
	f.Add(msg(attr(attrDevName, str("rxe0")), attr(attrPortIndex, u32(1))))
	f.Add([]byte{5, 0, 1, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		attrs, err := parseAttrs(b)
		if err != nil {
			return
		}
		// Re-encoding what was parsed must parse to the same attributes.
		var again []byte
		for _, a := range attrs {
			again = append(again, attr(a.typ, a.data)...)
		}
		attrs2, err := parseAttrs(again)
		if err != nil || len(attrs2) != len(attrs) {
			t.Fatalf("round trip: %v, %d vs %d attributes", err, len(attrs2), len(attrs))
		}
		for i := range attrs {
			if attrs[i].typ != attrs2[i].typ || string(attrs[i].data) != string(attrs2[i].data) {
				t.Fatalf("attribute %d differs", i)
			}
		}
	})
}
