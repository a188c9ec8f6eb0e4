package textkey

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzParse checks the round trip parse -> encode -> parse, and that the
// checked Encoder agrees with Encode on everything Parse accepts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"HeaderDigest=None\x00DataDigest=None\x00",
		"TargetName=iqn.2003-01.org.linux-iscsi.host.x8664:sn.1\x00TargetAddress=10.0.0.1:3260,1\x00",
		"A=1\x00\x00\x00",
		"A=1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		kvs, err := Parse(data)
		if err != nil {
			return
		}
		enc := Encode(kvs)
		if len(enc) > len(data) {
			t.Fatalf("encoding %d bytes longer than the %d-byte input", len(enc), len(data))
		}
		if !bytes.Equal(enc, data[:len(enc)]) {
			t.Fatalf("Encode(Parse(%q)) = %q is not a prefix of the input", data, enc)
		}
		back, err := Parse(enc)
		if err != nil {
			t.Fatalf("Parse(Encode(...)) = %v", err)
		}
		if !reflect.DeepEqual(back, kvs) {
			t.Fatalf("round trip %q != %q", back, kvs)
		}
		e := NewEncoder()
		e.AddKV(kvs...)
		checked, err := e.Bytes()
		if err != nil || !bytes.Equal(checked, enc) {
			t.Fatalf("Encoder = %q, %v; Encode = %q", checked, err, enc)
		}
	})
}

// fuzzOffers are the offers FuzzNegotiation's target answers: one key of
// every kind.
var fuzzOffers = []KV{
	{"HeaderDigest", "CRC32C,None"},
	{"MaxRecvDataSegmentLength", "262144"},
	{"MaxBurstLength", "262144"},
	{"FirstBurstLength", "65536"},
	{"DefaultTime2Wait", "2"},
	{"InitialR2T", "Yes"},
	{"ImmediateData", "Yes"},
	{"DataPDUInOrder", "No"},
	{"RDMAExtensions", "Yes"},
	{"MaxOutstandingUnexpectedPDUs", "0"},
	{"X-org.example.key", "v"},
}

// FuzzNegotiation feeds random target pairs, in two rounds, to a
// negotiation with an offer of every kind. It must never panic, must
// refuse any key sent twice, and whatever it accepts must respect the
// result functions.
func FuzzNegotiation(f *testing.F) {
	for _, s := range []string{
		"HeaderDigest=CRC32C\x00MaxBurstLength=65536\x00FirstBurstLength=8192\x00",
		"MaxBurstLength=0x200\x00MaxConnections=4\x00X-vendor=1\x00OFMarker=Yes\x00",
		"DefaultTime2Wait=3600\x00InitialR2T=Yes\x00ImmediateData=No\x00DataPDUInOrder=Yes\x00",
		"FirstBurstLength=Irrelevant\x00MaxBurstLength=512\x00RDMAExtensions=NotUnderstood\x00",
		"MaxRecvDataSegmentLength=8192\x00TargetAlias=t\x00TargetPortalGroupTag=1\x00",
		"HeaderDigest=None,CRC32C\x00",
		"MaxBurstLength=1\x00MaxBurstLength=1\x00",
	} {
		f.Add([]byte(s), uint8(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		kvs, err := Parse(data)
		if err != nil {
			return
		}
		n := NewNegotiation()
		for _, o := range fuzzOffers {
			if err := n.Offer(o.Key, o.Value); err != nil {
				t.Fatal(err)
			}
		}
		n.TakeOffers()
		cut := min(int(split), len(kvs))
		var replies []KV
		r1, err := n.Receive(kvs[:cut])
		if err == nil {
			replies = append(replies, r1...)
			var r2 []KV
			r2, err = n.Receive(kvs[cut:])
			replies = append(replies, r2...)
		}

		seen := map[string]bool{}
		dup := false
		for _, kv := range kvs {
			dup = dup || seen[kv.Key]
			seen[kv.Key] = true
		}
		if dup && err == nil {
			t.Fatalf("a repeated key was accepted: %q", kvs)
		}
		if err != nil {
			if _, err2 := n.Results(); err2 == nil {
				t.Fatal("Results succeeded after a protocol error")
			}
			return
		}

		for _, r := range replies {
			if ValidKey(r.Key) != nil {
				t.Fatalf("reply with invalid key %q", r.Key)
			}
			if d, ok := Lookup(r.Key); ok && !isSpecial(r.Value) {
				if err := d.check(r.Value); err != nil {
					t.Fatalf("reply %s=%q is illegal: %v", r.Key, r.Value, err)
				}
			}
		}
		p, err := n.Results()
		if err != nil {
			if p.FirstBurstLength <= p.MaxBurstLength {
				t.Fatalf("Results failed without FirstBurstLength > MaxBurstLength: %v", err)
			}
			return
		}
		switch {
		case p.HeaderDigest != "None" && p.HeaderDigest != "CRC32C":
			t.Fatalf("HeaderDigest %q", p.HeaderDigest)
		case p.MaxBurstLength < 512 || p.MaxBurstLength > 262144:
			t.Fatalf("MaxBurstLength %d outside 512..our 262144", p.MaxBurstLength)
		case p.FirstBurstLength > p.MaxBurstLength:
			t.Fatalf("FirstBurstLength %d > MaxBurstLength %d", p.FirstBurstLength, p.MaxBurstLength)
		case p.DefaultTime2Wait < 2 || p.DefaultTime2Wait > 3600:
			t.Fatalf("DefaultTime2Wait %d outside our 2..3600", p.DefaultTime2Wait)
		case !p.InitialR2T:
			t.Fatal("InitialR2T=No although we offered Yes (OR)")
		case p.InitiatorMaxRecvDataSegmentLength != 262144:
			t.Fatalf("our MaxRecvDataSegmentLength became %d", p.InitiatorMaxRecvDataSegmentLength)
		case p.TargetMaxRecvDataSegmentLength < 512 || p.TargetMaxRecvDataSegmentLength > 1<<24-1:
			t.Fatalf("target MaxRecvDataSegmentLength %d", p.TargetMaxRecvDataSegmentLength)
		}
	})
}
