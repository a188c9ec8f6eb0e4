package scsi

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestPersistentReserveCDBs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cdb  CDB
		want []byte
	}{
		{"read keys", PersistentReserveIn(PRInReadKeys, 0x1000),
			[]byte{0x5e, 0x00, 0, 0, 0, 0, 0, 0x10, 0x00, 0}},
		{"read full status", PersistentReserveIn(PRInReadFullStatus, 8192),
			[]byte{0x5e, 0x03, 0, 0, 0, 0, 0, 0x20, 0x00, 0}},
		{"register", PersistentReserveOut(PROutRegister, 0),
			[]byte{0x5f, 0x00, 0x00, 0, 0, 0, 0, 0, 24, 0}},
		{"reserve WERO", PersistentReserveOut(PROutReserve, PRWriteExclusiveRegistrantsOnly),
			[]byte{0x5f, 0x01, 0x05, 0, 0, 0, 0, 0, 24, 0}},
		{"preempt EA", PersistentReserveOut(PROutPreempt, PRExclusiveAccess),
			[]byte{0x5f, 0x04, 0x03, 0, 0, 0, 0, 0, 24, 0}},
		{"register and ignore", PersistentReserveOut(PROutRegisterAndIgnoreExisting, 0),
			[]byte{0x5f, 0x06, 0x00, 0, 0, 0, 0, 0, 24, 0}},
	} {
		if got := tc.cdb.Bytes(); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: % x, want % x", tc.name, got, tc.want)
		}
	}
	if got := PersistentReserveOut(PROutRelease, 5).Opcode().String(); got != "PERSISTENT RESERVE OUT" {
		t.Errorf("opcode name %q", got)
	}
}

func TestPROutParameters(t *testing.T) {
	got := PROutParameters{Key: 0x0102030405060708, ActionKey: 0x1112131415161718, AllTgPt: true, APTPL: true}.Marshal()
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0, 0, 0, 0, 0x05, 0, 0, 0}
	if !bytes.Equal(got, want) {
		t.Fatalf("% x\nwant % x", got, want)
	}
	if got := (PROutParameters{}).Marshal(); !bytes.Equal(got, make([]byte, 24)) {
		t.Fatalf("zero parameters: % x", got)
	}
}

func TestParsePRKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want PRKeys
		err  error
	}{
		{"none", []byte{0, 0, 0, 7, 0, 0, 0, 0}, PRKeys{Generation: 7}, nil},
		{"two", []byte{0, 0, 0, 2, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0xaa, 0, 0, 0, 0, 0, 0, 0, 0xbb},
			PRKeys{Generation: 2, Keys: []uint64{0xaa, 0xbb}}, nil},
		{"truncated", []byte{0, 0, 0, 2, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 0xaa, 0, 0},
			PRKeys{Generation: 2, Keys: []uint64{0xaa}, Truncated: true}, nil},
		{"short header", []byte{0, 0, 0}, PRKeys{}, ErrShortData},
		{"ragged", []byte{0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 1}, PRKeys{}, ErrMalformed},
	} {
		got, err := ParsePRKeys(tc.b)
		if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParsePRReservation(t *testing.T) {
	held := []byte{0, 0, 0, 3, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0x05, 0, 0}
	for _, tc := range []struct {
		name string
		b    []byte
		want PRReservation
		err  error
	}{
		{"free", []byte{0, 0, 0, 3, 0, 0, 0, 0}, PRReservation{Generation: 3}, nil},
		{"held", held, PRReservation{Generation: 3, Reserved: true, Key: 0x1234, Type: PRWriteExclusiveRegistrantsOnly}, nil},
		{"short descriptor", held[:20], PRReservation{}, ErrMalformed},
		{"bad scope", append(append([]byte(nil), held[:21]...), 0x15, 0, 0), PRReservation{}, ErrMalformed},
		{"short header", held[:5], PRReservation{}, ErrShortData},
	} {
		got, err := ParsePRReservation(tc.b)
		if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParsePRStatus(t *testing.T) {
	// LIO writes format-01 TransportIDs: "NAME,i,0xISID".
	lio := ISCSITransportID("iqn.2026-11.io.iser-attach:node-a,i,0x23d000000001")
	lio[0] |= 0x40
	s := PRStatus{Generation: 9, Registrants: []PRRegistrant{
		{Key: 0xa1, Holder: true, Type: PRWriteExclusiveRegistrantsOnly, RelativePortID: 1, TransportID: lio},
		{Key: 0xb2, AllTgPt: true, TransportID: ISCSITransportID("iqn.2026-11.io.iser-attach:node-b")},
	}}
	got, err := ParsePRStatus(s.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Registrants) != 2 {
		t.Fatalf("%d registrants", len(got.Registrants))
	}
	a, b := got.Registrants[0], got.Registrants[1]
	if a.Key != 0xa1 || !a.Holder || a.Type != PRWriteExclusiveRegistrantsOnly || a.RelativePortID != 1 ||
		a.InitiatorName != "iqn.2026-11.io.iser-attach:node-a" || a.InitiatorSession != "0x23d000000001" {
		t.Errorf("first: %+v", a)
	}
	if b.Key != 0xb2 || b.Holder || !b.AllTgPt || b.InitiatorName != "iqn.2026-11.io.iser-attach:node-b" || b.InitiatorSession != "" {
		t.Errorf("second: %+v", b)
	}
	if len(ISCSITransportID("abc"))%4 != 0 {
		t.Error("TransportID not padded to 4 bytes")
	}
	bad := s.Marshal()
	bad[8+20+3] = 200 // the first descriptor's TransportID runs past the reply
	if _, err := ParsePRStatus(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("overlong TransportID: %v", err)
	}
	cut := s.Marshal()
	cut = cut[:len(cut)-10] // the target had more than the allocation length let through
	got, err = ParsePRStatus(cut)
	if err != nil || !got.Truncated || len(got.Registrants) != 1 {
		t.Errorf("truncated: %+v, %v", got, err)
	}
}
