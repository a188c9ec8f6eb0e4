package textkey

import (
	"errors"
	"reflect"
	"testing"
)

func TestResultsDefaults(t *testing.T) {
	p, err := NewNegotiation().Results()
	if err != nil {
		t.Fatal(err)
	}
	want := Params{
		HeaderDigest: "None", DataDigest: "None",
		InitiatorMaxRecvDataSegmentLength: 8192, TargetMaxRecvDataSegmentLength: 8192,
		MaxBurstLength: 262144, FirstBurstLength: 65536,
		InitialR2T: true, ImmediateData: true, MaxOutstandingR2T: 1,
		DataPDUInOrder: true, DataSequenceInOrder: true,
		DefaultTime2Wait: 2, DefaultTime2Retain: 20, ErrorRecoveryLevel: 0, MaxConnections: 1,
		RDMAExtensions: false, InitiatorRecvDataSegmentLength: 8192, TargetRecvDataSegmentLength: 8192,
	}
	if p != want {
		t.Fatalf("defaults:\n got %+v\nwant %+v", p, want)
	}
}

// A login to Linux LIO over iSER, answered the way
// drivers/target/iscsi/iscsi_target_parameters.c answers: boolean offers
// whose result is fixed are not answered, the iSER lengths are echoed, and
// keys we did not offer (here MaxConnections and DataSequenceInOrder) are
// proposed by the target.
func TestLIOStyleISERLogin(t *testing.T) {
	n := NewNegotiation()
	offers := []KV{
		{"RDMAExtensions", "Yes"},
		{"InitiatorRecvDataSegmentLength", "8192"},
		{"TargetRecvDataSegmentLength", "8192"},
		{"MaxBurstLength", "524288"},
		{"FirstBurstLength", "65536"},
		{"InitialR2T", "Yes"},
		{"ImmediateData", "Yes"},
		{"MaxOutstandingR2T", "1"},
		{"ErrorRecoveryLevel", "0"},
		{"DefaultTime2Wait", "2"},
		{"DefaultTime2Retain", "0"},
		{"DataPDUInOrder", "Yes"},
	}
	for _, o := range offers {
		if err := n.Offer(o.Key, o.Value); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.TakeOffers(); !reflect.DeepEqual(got, offers) {
		t.Fatalf("TakeOffers = %q", got)
	}
	target, err := Parse([]byte("TargetPortalGroupTag=1\x00" +
		"ImmediateData=Yes\x00MaxBurstLength=262144\x00FirstBurstLength=65536\x00" +
		"DefaultTime2Wait=2\x00DefaultTime2Retain=0\x00MaxOutstandingR2T=1\x00" +
		"ErrorRecoveryLevel=0\x00RDMAExtensions=Yes\x00" +
		"InitiatorRecvDataSegmentLength=8192\x00TargetRecvDataSegmentLength=8192\x00" +
		"MaxConnections=1\x00DataSequenceInOrder=Yes\x00"))
	if err != nil {
		t.Fatal(err)
	}
	reply, err := n.Receive(target)
	if err != nil {
		t.Fatal(err)
	}
	wantReply := []KV{{"MaxConnections", "1"}, {"DataSequenceInOrder", "Yes"}}
	if !reflect.DeepEqual(reply, wantReply) {
		t.Fatalf("reply = %q, want %q", reply, wantReply)
	}
	if o := n.Outstanding(); o != nil {
		t.Fatalf("Outstanding = %q", o)
	}
	p, err := n.Results()
	if err != nil {
		t.Fatal(err)
	}
	if !p.RDMAExtensions || p.MaxBurstLength != 262144 || p.FirstBurstLength != 65536 ||
		p.DefaultTime2Retain != 0 || !p.InitialR2T || !p.ImmediateData ||
		p.TargetRecvDataSegmentLength != 8192 || p.TargetPortalGroupTag != 1 {
		t.Fatalf("Results = %+v", p)
	}
}

func TestResultsMaxRecvDataSegmentLengthBothWays(t *testing.T) {
	n := NewNegotiation()
	if err := n.Offer("MaxRecvDataSegmentLength", "262144"); err != nil {
		t.Fatal(err)
	}
	n.TakeOffers()
	if _, err := n.Receive([]KV{{"MaxRecvDataSegmentLength", "0x10000"}, {"TargetAlias", "lun0"}}); err != nil {
		t.Fatal(err)
	}
	p, err := n.Results()
	if err != nil {
		t.Fatal(err)
	}
	if p.InitiatorMaxRecvDataSegmentLength != 262144 || p.TargetMaxRecvDataSegmentLength != 65536 {
		t.Fatalf("ours %d theirs %d", p.InitiatorMaxRecvDataSegmentLength, p.TargetMaxRecvDataSegmentLength)
	}
	if p.TargetAlias != "lun0" {
		t.Fatalf("TargetAlias = %q", p.TargetAlias)
	}
}

func TestResultsFirstBurstExceedsMaxBurst(t *testing.T) {
	tests := []struct {
		name    string
		offers  []KV
		target  []KV
		wantErr bool
		wantFBL uint32
	}{
		{
			name:    "relevant: protocol error",
			offers:  []KV{{"MaxBurstLength", "262144"}, {"FirstBurstLength", "65536"}},
			target:  []KV{{"MaxBurstLength", "16384"}, {"FirstBurstLength", "65536"}},
			wantErr: true,
		},
		{
			name:    "target offered a smaller MaxBurstLength",
			offers:  []KV{{"FirstBurstLength", "65536"}},
			target:  []KV{{"FirstBurstLength", "65536"}, {"MaxBurstLength", "8192"}},
			wantErr: true,
		},
		{
			name:    "irrelevant answer: clamped",
			offers:  []KV{{"MaxBurstLength", "262144"}, {"FirstBurstLength", "65536"}},
			target:  []KV{{"MaxBurstLength", "16384"}, {"FirstBurstLength", "Irrelevant"}},
			wantFBL: 16384,
		},
		{
			name:    "InitialR2T=Yes ImmediateData=No: clamped",
			offers:  []KV{{"ImmediateData", "No"}, {"MaxBurstLength", "8192"}},
			target:  []KV{{"MaxBurstLength", "8192"}},
			wantFBL: 8192,
		},
		{
			name:    "legal",
			offers:  []KV{{"MaxBurstLength", "262144"}, {"FirstBurstLength", "65536"}},
			target:  []KV{{"MaxBurstLength", "65536"}, {"FirstBurstLength", "65536"}},
			wantFBL: 65536,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := NewNegotiation()
			for _, o := range tc.offers {
				if err := n.Offer(o.Key, o.Value); err != nil {
					t.Fatal(err)
				}
			}
			n.TakeOffers()
			if _, err := n.Receive(tc.target); err != nil {
				t.Fatal(err)
			}
			p, err := n.Results()
			if tc.wantErr {
				var pe *ProtocolError
				if !errors.As(err, &pe) || pe.Key != "FirstBurstLength" {
					t.Fatalf("Results err = %v, want ProtocolError on FirstBurstLength", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.FirstBurstLength != tc.wantFBL || p.FirstBurstLength > p.MaxBurstLength {
				t.Fatalf("FirstBurstLength %d MaxBurstLength %d, want FBL %d", p.FirstBurstLength, p.MaxBurstLength, tc.wantFBL)
			}
		})
	}
}

func TestResultsAfterProtocolError(t *testing.T) {
	n := NewNegotiation()
	if _, err := n.Receive([]KV{{"SessionType", "Normal"}}); err == nil {
		t.Fatal("target-sent SessionType accepted")
	}
	if _, err := n.Results(); err == nil || err != n.Err() {
		t.Fatalf("Results err = %v, want the negotiation's error %v", err, n.Err())
	}
}
