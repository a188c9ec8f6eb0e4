package pdu

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func TestISERHeaderBytes(t *testing.T) {
	h := ISERHeader{Flags: ISERFlagControl | ISERFlagRSV, ReadSTag: 0x11223344, ReadVA: 0x0102030405060708}
	b := make([]byte, ISERHeaderLen)
	h.Marshal(b)
	want, _ := hex.DecodeString("14000000" + "00000000" + "0000000000000000" + "11223344" + "0102030405060708")
	if !bytes.Equal(b, want) {
		t.Fatalf("got %x\nwant %x", b, want)
	}
	var g ISERHeader
	if err := g.Unmarshal(b); err != nil || g != h {
		t.Fatalf("round trip %+v %v", g, err)
	}
}

func TestISERHeaderRejects(t *testing.T) {
	for _, b := range [][]byte{
		make([]byte, 27),
		append([]byte{ISERFlagHello}, make([]byte, 27)...),
		append([]byte{ISERFlagHelloReply}, make([]byte, 27)...),
		append([]byte{0x50}, make([]byte, 27)...),
		make([]byte, 28), // opcode 0
	} {
		var h ISERHeader
		if err := h.Unmarshal(b); err == nil {
			t.Errorf("accepted %x", b)
		}
	}
}

func TestISERPrivateData(t *testing.T) {
	if got := ISERPrivateData(); !bytes.Equal(got, []byte{0xc0, 0, 0, 0}) {
		t.Fatalf("%x", got)
	}
}

func FuzzISERHeader(f *testing.F) {
	b := make([]byte, ISERHeaderLen)
	(&ISERHeader{Flags: 0x1c, WriteSTag: 1, WriteVA: 2, ReadSTag: 3, ReadVA: 4}).Marshal(b)
	f.Add(b)
	f.Add([]byte{0x20})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h ISERHeader
		if err := h.Unmarshal(data); err != nil {
			return
		}
		out := make([]byte, ISERHeaderLen)
		h.Marshal(out)
		var h2 ISERHeader
		if err := h2.Unmarshal(out); err != nil || h2 != h {
			t.Fatalf("round trip: %+v -> %+v (%v)", h, h2, err)
		}
	})
}
