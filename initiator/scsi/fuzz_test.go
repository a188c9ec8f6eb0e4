package scsi

import (
	"reflect"
	"testing"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/ and include the tgt
// captures. Run one target for a while with, for example:
//
//	go test -run '^$' -fuzz '^FuzzParseSense$' -fuzztime 30s ./initiator/scsi

func FuzzParseSense(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSense(b)
		if err != nil {
			if CheckStatus(StatusCheckCondition, b) == nil {
				t.Fatal("CheckStatus returned nil for unreadable sense")
			}
			return
		}
		again, err := ParseSense(s.Marshal())
		if err != nil {
			t.Fatalf("reparse of % x: %v", s.Marshal(), err)
		}
		if again != s {
			t.Fatalf("round trip\n got %+v\nwant %+v", again, s)
		}
		err = CheckStatus(StatusCheckCondition, b)
		if s.Key == KeyRecoveredError && !s.Deferred() {
			if err != nil {
				t.Fatalf("CheckStatus(current RECOVERED ERROR) = %v, want nil", err)
			}
			return
		}
		se, ok := err.(*SenseError)
		if !ok {
			t.Fatal("CheckStatus did not return *SenseError for readable sense")
		}
		_ = se.Error()
		_ = se.Errno()
		_ = se.Retryable()
	})
}

func FuzzParseSenseSegment(f *testing.F) {
	f.Add([]byte{0, 18, 0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSenseSegment(b)
		if err == nil && len(s) > len(b) {
			t.Fatalf("sense of %d bytes from a %d byte segment", len(s), len(b))
		}
	})
}

func FuzzParseDeviceIdentification(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := ParseDeviceIdentification(b)
		if err != nil {
			return
		}
		_ = id.WWID()
		for i := range id.Designators {
			_ = id.Designators[i].String()
		}
		again, err := ParseDeviceIdentification(id.Marshal())
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if len(again.Designators) != len(id.Designators) || (len(id.Designators) > 0 && !reflect.DeepEqual(again, id)) {
			t.Fatalf("round trip\n got %+v\nwant %+v", again, id)
		}
		if again.WWID() != id.WWID() {
			t.Fatalf("WWID changed: %q, %q", again.WWID(), id.WWID())
		}
	})
}

func FuzzParseReadCapacity16(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseReadCapacity16(b)
		if err != nil {
			return
		}
		again, err := ParseReadCapacity16(c.Marshal())
		if err != nil || again != c {
			t.Fatalf("round trip %+v, %v; want %+v", again, err, c)
		}
		_ = c.PhysicalBlockLength()
	})
}

func FuzzParseReportLUNs(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReportLUNs(b)
		if err != nil {
			return
		}
		if uint64(len(r.LUNs))*8 > uint64(r.ListLength) {
			t.Fatalf("%d LUNs for list length %d", len(r.LUNs), r.ListLength)
		}
		for _, l := range r.LUNs {
			d := DecodeLUN(l)
			if d.Simple {
				enc, err := EncodeLUN(d.Number)
				if err != nil {
					t.Fatalf("EncodeLUN(%d): %v", d.Number, err)
				}
				// Flat space encoding of a number below 256 is simple but
				// EncodeLUN prefers peripheral addressing.
				if enc != l && !(d.Method == AddressFlat && d.Number < 256) {
					t.Fatalf("EncodeLUN(%d) = % x, decoded from % x", d.Number, enc, l)
				}
			}
		}
		again, err := ParseReportLUNs(r.Marshal())
		if err != nil || again.Truncated || !reflect.DeepEqual(again.LUNs, r.LUNs) {
			t.Fatalf("round trip %+v, %v; want %+v", again, err, r)
		}
	})
}

func FuzzParseInquiry(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseInquiry(b)
		if err != nil {
			return
		}
		again, err := ParseInquiry(d.Marshal())
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("round trip\n got %+v, %v\nwant %+v", again, err, d)
		}
	})
}

func FuzzParseModeSense(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) (ModeParameters, error){ParseModeSense6, ParseModeSense10} {
			m, err := parse(b)
			if err != nil {
				continue
			}
			n := len(m.BlockDescriptors)
			for _, p := range m.Pages {
				n += len(p.Data)
				if p.Code == ModePageCaching && !p.SPF {
					_, _ = ParseCachingPage(p)
				}
				if p.Code == ModePageControlMode && !p.SPF {
					_, _ = ParseControlPage(p)
				}
			}
			if n > len(b) {
				t.Fatalf("%d bytes of descriptors and pages from %d bytes", n, len(b))
			}
		}
	})
}

func FuzzParseVPD(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		if bl, err := ParseBlockLimits(b); err == nil {
			if again, err := ParseBlockLimits(bl.Marshal()); err != nil || again != bl {
				t.Fatalf("block limits round trip %+v, %v; want %+v", again, err, bl)
			}
		}
		if p, err := ParseLogicalBlockProvisioning(b); err == nil {
			if again, err := ParseLogicalBlockProvisioning(p.Marshal()); err != nil || again != p {
				t.Fatalf("provisioning round trip %+v, %v; want %+v", again, err, p)
			}
		}
		_, _ = ParseSupportedVPDPages(b)
		_, _ = ParseUnitSerialNumber(b)
		if descs, err := ParseUnmapParameterList(b); err == nil {
			pl, err := UnmapParameterList(descs)
			if err != nil {
				t.Fatal(err)
			}
			if again, err := ParseUnmapParameterList(pl); err != nil || !reflect.DeepEqual(again, descs) {
				t.Fatalf("unmap round trip %v, %v; want %v", again, err, descs)
			}
		}
	})
}

func FuzzParseReportTargetPortGroups(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, extended bool) {
		g, err := ParseReportTargetPortGroups(b, extended)
		if err != nil {
			return
		}
		if g.Extended && !extended {
			t.Fatal("extended header taken though not asked for")
		}
		again, err := ParseReportTargetPortGroups(g.Marshal(), extended)
		if err != nil {
			t.Fatalf("reparse of % x: %v", g.Marshal(), err)
		}
		if again.Truncated || again.Extended != g.Extended || again.ImplicitTransitionTime != g.ImplicitTransitionTime ||
			len(again.Groups) != len(g.Groups) {
			t.Fatalf("round trip\n got %+v\nwant %+v", again, g)
		}
		for i := range g.Groups {
			if len(g.Groups[i].Ports) == 0 {
				g.Groups[i].Ports = nil
			}
			if !reflect.DeepEqual(again.Groups[i], g.Groups[i]) {
				t.Fatalf("group %d: got %+v, want %+v", i, again.Groups[i], g.Groups[i])
			}
		}
	})
}

func FuzzParsePRStatus(f *testing.F) {
	f.Add(PRStatus{Generation: 1, Registrants: []PRRegistrant{
		{Key: 1, Holder: true, Type: PRWriteExclusiveRegistrantsOnly, TransportID: ISCSITransportID("iqn.a")},
	}}.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParsePRStatus(b)
		if err != nil || s.Truncated {
			return
		}
		for i := range s.Registrants {
			if !s.Registrants[i].Holder {
				s.Registrants[i].Type = 0 // a non-holder's TYPE is not kept by Marshal
			}
		}
		again, err := ParsePRStatus(s.Marshal())
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip\n got %+v\nwant %+v", again, s)
		}
	})
}

func FuzzParsePRKeys(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0xaa})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParsePRKeys(b)
		if err != nil {
			return
		}
		if len(k.Keys)*8 > len(b) {
			t.Fatalf("%d keys from %d bytes", len(k.Keys), len(b))
		}
	})
}

func FuzzParsePRReservation(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0x05, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParsePRReservation(b)
		if err != nil {
			return
		}
		if r.Reserved && len(b) < 24 {
			t.Fatalf("reserved from %d bytes", len(b))
		}
	})
}
