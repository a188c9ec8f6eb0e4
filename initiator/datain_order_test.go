package initiator_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// segment is one scripted Data-In of an 8 KiB read.
type segment struct {
	dataSN, offset uint32
	fill           byte
}

// TestDataInMustBeInOrder: with DataPDUInOrder=Yes (the only value our
// offer allows) each Data-In starts where the previous one ended, with the
// next DataSN. Anything else fails the read and the session even when the
// byte count adds up and the status is GOOD, since part of the buffer was
// never written.
func TestDataInMustBeInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		segs []segment
		ok   bool
	}{
		{"in order", []segment{{0, 0, 1}, {1, 4096, 2}}, true},
		{"both at offset 0", []segment{{0, 0, 1}, {1, 0, 2}}, false},
		{"second half first", []segment{{0, 4096, 1}, {1, 0, 2}}, false},
		{"gap then overlap", []segment{{0, 0, 1}, {1, 2048, 2}}, false},
		{"DataSN repeated", []segment{{0, 0, 1}, {0, 4096, 2}}, false},
		{"DataSN skipped", []segment{{0, 0, 1}, {2, 4096, 2}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := loginTo(t, withLogin(func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
				if req.BHS.Opcode() != pdu.OpSCSICommand {
					return tg.Good(req)
				}
				tg.Ack(req)
				var out []iscsitest.Reply
				for i, sg := range tc.segs {
					d := pdu.DataIn{ITT: req.BHS.ITT(), TTT: 0xffffffff, DataSN: sg.dataSN, BufferOffset: sg.offset}
					if i == len(tc.segs)-1 {
						d.Final, d.HasStatus, d.TargetSNs = true, true, tg.SNs(true)
					}
					out = append(out, iscsitest.Reply{PDU: pdu.NewPDU(&d, bytes.Repeat([]byte{sg.fill}, 4096))})
				}
				return out
			}), nil)
			if err != nil {
				t.Fatal(err)
			}
			r, got, err := read(ctx5(t), s, 8192)
			if tc.ok {
				want := append(bytes.Repeat([]byte{1}, 4096), bytes.Repeat([]byte{2}, 4096)...)
				if err != nil || r.Status != 0 || !bytes.Equal(got, want) {
					t.Fatalf("in-order read: %v %+v, data equal %v", err, r, bytes.Equal(got, want))
				}
				return
			}
			var pe *pdu.ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("read = %+v, %v; want a protocol error", r, err)
			}
			if err := expectEnd(t, s); !errors.As(err, &pe) {
				t.Fatalf("session error %v, want the protocol error", err)
			}
		})
	}
}
