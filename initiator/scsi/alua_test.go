package scsi

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// lioRTPG is shaped as LIO builds REPORT TARGET PORT GROUPS with the
// extended header for a LU behind two groups (configfs alua/ groups id 1,
// relative port 1, and id 2, relative port 2); 0xcf is LIO's default set of
// supported states (T, O, U, S, AN, AO). Made by hand, not captured.
var lioRTPG = []byte{
	0x00, 0x00, 0x00, 0x1c, // RETURN DATA LENGTH 28
	0x10, 0x00, 0x00, 0x00, // FORMAT TYPE 001b, IMPLICIT TRANSITION TIME 0
	0x80, 0xcf, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, // PREF, active/optimized, id 1, implicit, 1 port
	0x00, 0x00, 0x00, 0x01, // relative port 1
	0x01, 0xcf, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, // active/non-optimized, id 2, 1 port
	0x00, 0x00, 0x00, 0x02, // relative port 2
}

func TestParseReportTargetPortGroups(t *testing.T) {
	lengthOnly := append([]byte{0, 0, 0, 0x18}, lioRTPG[8:]...)
	two := []TargetPortGroup{
		{Preferred: true, State: AccessActiveOptimized, SupportsTransitioning: true, SupportsOffline: true,
			SupportsUnavailable: true, SupportsStandby: true, SupportsNonOptimized: true, SupportsOptimized: true,
			ID: 1, StatusCode: 2, Ports: []uint16{1}},
		{State: AccessActiveNonOptimized, SupportsTransitioning: true, SupportsOffline: true,
			SupportsUnavailable: true, SupportsStandby: true, SupportsNonOptimized: true, SupportsOptimized: true,
			ID: 2, Ports: []uint16{2}},
	}
	for _, tc := range []struct {
		name     string
		b        []byte
		extended bool
		want     TargetPortGroups
		err      error
	}{
		{"extended", lioRTPG, true, TargetPortGroups{ReturnDataLength: 28, Extended: true, Groups: two}, nil},
		{"length only, as asked", lengthOnly, false, TargetPortGroups{ReturnDataLength: 24, Groups: two}, nil},
		// A target without the extended header answers in the length-only
		// format though asked: byte 4 is then the first group's PREF and state.
		{"length only, extended asked", lengthOnly, true, TargetPortGroups{ReturnDataLength: 24, Groups: two}, nil},
		{"cut in the second group", lioRTPG[:30], true,
			TargetPortGroups{ReturnDataLength: 28, Truncated: true, Extended: true, Groups: two[:1]}, nil},
		{"more than the length says", append(append([]byte{}, lioRTPG...), 0xff, 0xff), true,
			TargetPortGroups{ReturnDataLength: 28, Extended: true, Groups: two}, nil},
		{"no groups", []byte{0, 0, 0, 4, 0x10, 60, 0, 0}, true,
			TargetPortGroups{ReturnDataLength: 4, Extended: true, ImplicitTransitionTime: 60}, nil},
		{"short header", []byte{0, 0, 0}, true, TargetPortGroups{}, ErrShortData},
		{"length ends inside a descriptor", []byte{0, 0, 0, 4, 0x80, 0, 0, 1}, false, TargetPortGroups{}, ErrMalformed},
		{"port count beyond the length", append([]byte{0, 0, 0, 8}, 0, 0, 0, 1, 0, 0, 0, 3), false,
			TargetPortGroups{}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReportTargetPortGroups(tc.b, tc.extended)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTargetPortGroupsMarshal(t *testing.T) {
	got, err := ParseReportTargetPortGroups(lioRTPG, true)
	if err != nil {
		t.Fatal(err)
	}
	if b := got.Marshal(); !bytes.Equal(b, lioRTPG) {
		t.Fatalf("Marshal = % x\nwant      % x", b, lioRTPG)
	}
	g, ok := got.GroupOfPort(2)
	if !ok || g.ID != 2 || g.State != AccessActiveNonOptimized {
		t.Fatalf("GroupOfPort(2) = %+v, %v", g, ok)
	}
	if _, ok := got.GroupOfPort(3); ok {
		t.Fatal("GroupOfPort(3) found a group")
	}
	if n := got.AllocationLength(); n != ReportTargetPortGroupsLength {
		t.Fatalf("AllocationLength = %d", n)
	}
	big := TargetPortGroups{ReturnDataLength: 1000}
	if n := big.AllocationLength(); n != 1004 {
		t.Fatalf("AllocationLength of 1000 bytes = %d", n)
	}
}

func TestReportTargetPortGroupsCDB(t *testing.T) {
	for _, tc := range []struct {
		extended bool
		want     []byte
	}{
		{true, []byte{0xa3, 0x2a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}},
		{false, []byte{0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}},
	} {
		c := ReportTargetPortGroups(tc.extended, 256)
		if !bytes.Equal(c.Bytes(), tc.want) {
			t.Errorf("extended %v: % x, want % x", tc.extended, c.Bytes(), tc.want)
		}
		if c.Opcode().String() != "MAINTENANCE IN" {
			t.Errorf("opcode name %q", c.Opcode())
		}
	}
}

func TestSenseALUA(t *testing.T) {
	for _, tc := range []struct {
		code      uint8
		key       SenseKey
		asc, ascq uint8
		want      ALUACondition
		serves    bool
	}{
		{SenseFixedCurrent, KeyNotReady, 0x04, 0x0a, ALUATransitioning, false},
		{SenseFixedCurrent, KeyNotReady, 0x04, 0x0b, ALUAStandby, false},
		{SenseDescriptorCurrent, KeyNotReady, 0x04, 0x0c, ALUAUnavailable, false},
		{SenseFixedCurrent, KeyUnitAttention, 0x2a, 0x06, ALUAStateChanged, false},
		{SenseFixedCurrent, KeyUnitAttention, 0x2a, 0x07, ALUATransitionFailed, false},
		{SenseFixedCurrent, KeyNotReady, 0x04, 0x01, ALUANone, false},       // becoming ready
		{SenseFixedCurrent, KeyUnitAttention, 0x2a, 0x09, ALUANone, false},  // capacity changed
		{SenseFixedCurrent, KeyIllegalRequest, 0x04, 0x0b, ALUANone, false}, // wrong key
		{SenseFixedDeferred, KeyNotReady, 0x04, 0x0b, ALUANone, false},      // about an earlier command
		{SenseDescriptorDeferred, KeyUnitAttention, 0x2a, 0x06, ALUANone, false},
	} {
		s := Sense{ResponseCode: tc.code, Key: tc.key, ASC: tc.asc, ASCQ: tc.ascq}
		if got := s.ALUA(); got != tc.want {
			t.Errorf("%s %02x/%02x (response code %02x): %v, want %v", tc.key, tc.asc, tc.ascq, tc.code, got, tc.want)
		}
		again, err := ParseSense(s.Marshal())
		if err != nil || again.ALUA() != tc.want {
			t.Errorf("parsed %s %02x/%02x: %v, %v", tc.key, tc.asc, tc.ascq, again.ALUA(), err)
		}
	}
}

func TestAccessState(t *testing.T) {
	serving := map[AccessState]bool{AccessActiveOptimized: true, AccessActiveNonOptimized: true}
	for _, a := range []AccessState{AccessActiveOptimized, AccessActiveNonOptimized, AccessStandby,
		AccessUnavailable, AccessLBADependent, AccessOffline, AccessTransitioning, 5} {
		if a.ServesIO() != serving[a] {
			t.Errorf("%v.ServesIO() = %v", a, a.ServesIO())
		}
		if a.String() == "" {
			t.Errorf("%d has no name", a)
		}
	}
	if AccessState(5).String() != "access state 0x5" {
		t.Errorf("unknown state: %q", AccessState(5).String())
	}
}
