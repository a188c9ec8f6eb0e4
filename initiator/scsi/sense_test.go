package scsi

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

func TestParseSense(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Sense
	}{
		{
			// tgt, READ(10) past the end.
			name: "tgt fixed LBA out of range",
			in:   "70 00 05 00 00 00 00 0a 00 00 00 00 21 00 00 00 00 00",
			want: Sense{ResponseCode: 0x70, Key: KeyIllegalRequest, ASC: 0x21},
		},
		{
			name: "fixed with information, SKS field pointer",
			in:   "f0 00 03 00 00 12 34 0a 00 00 00 01 11 00 05 c0 00 02",
			want: Sense{ResponseCode: 0x70, Key: KeyMediumError, ASC: 0x11, Info: 0x1234, InfoValid: true,
				CommandSpecific: 1, FRU: 5, SKSValid: true, SenseKeySpecific: [3]byte{0x40, 0, 2}},
		},
		{
			name: "fixed deferred, flags",
			in:   "71 00 e4 00 00 00 00 0a 00 00 00 00 0c 00 00 00 00 00",
			want: Sense{ResponseCode: 0x71, Key: KeyHardwareError, ASC: 0x0c, FileMark: true, EOM: true, ILI: true},
		},
		{
			// Fields past ADDITIONAL SENSE LENGTH are ignored, as Linux does.
			name: "fixed additional length cuts ASC",
			in:   "70 00 06 00 00 00 00 04 00 00 00 00 29 00 00 00 00 00",
			want: Sense{ResponseCode: 0x70, Key: KeyUnitAttention},
		},
		{
			name: "fixed truncated to key",
			in:   "70 00 02",
			want: Sense{ResponseCode: 0x70, Key: KeyNotReady},
		},
		{
			name: "fixed VALID without information bytes",
			in:   "f0 00 03 00",
			want: Sense{ResponseCode: 0x70, Key: KeyMediumError},
		},
		{
			// LIO with D_SENSE=1: descriptor sense, information descriptor.
			name: "descriptor with information",
			in:   "72 03 11 00 00 00 00 0c 00 0a 80 00 00 00 00 01 00 00 00 00",
			want: Sense{ResponseCode: 0x72, Key: KeyMediumError, ASC: 0x11, Info: 1 << 32, InfoValid: true},
		},
		{
			name: "descriptor all kinds",
			in: `73 05 24 00 00 00 00 28
				00 0a 00 00 00 00 00 00 00 00 00 09
				01 0a 00 00 00 00 00 00 00 00 00 07
				02 06 00 00 c8 00 03 00
				03 02 00 2a
				05 02 00 20`,
			want: Sense{ResponseCode: 0x73, Key: KeyIllegalRequest, ASC: 0x24, CommandSpecific: 7,
				SKSValid: true, SenseKeySpecific: [3]byte{0x48, 0, 3}, FRU: 0x2a, ILI: true},
		},
		{
			name: "descriptor stream, truncated last descriptor ignored",
			in:   "72 00 00 01 00 00 00 08 04 02 00 c0 00 0a 80 00",
			want: Sense{ResponseCode: 0x72, Key: KeyNoSense, ASCQ: 1, FileMark: true, EOM: true},
		},
		{
			name: "descriptor first of a type wins",
			in:   "72 06 2a 09 00 00 00 08 03 02 00 01 03 02 00 02",
			want: Sense{ResponseCode: 0x72, Key: KeyUnitAttention, ASC: 0x2a, ASCQ: 0x09, FRU: 1},
		},
		{
			name: "descriptor header only",
			in:   "72 0b 47 05",
			want: Sense{ResponseCode: 0x72, Key: KeyAbortedCommand, ASC: 0x47, ASCQ: 0x05},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSense(h(t, tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			// Marshal and parse again: the result must not change.
			again, err := ParseSense(got.Marshal())
			if err != nil {
				t.Fatalf("reparse: %v", err)
			}
			if again != got {
				t.Errorf("round trip\ngot  %+v\nwant %+v", again, got)
			}
		})
	}
}

func TestParseSenseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", ErrShortData},
		{"fixed too short", "70 00", ErrShortData},
		{"descriptor too short", "72", ErrShortData},
		{"vendor specific format", "7f 00 05 00", ErrMalformed},
		{"not sense", "00 00 00 00 00 00 00 00", ErrMalformed},
	}
	for _, tt := range tests {
		if _, err := ParseSense(h(t, tt.in)); !errors.Is(err, tt.want) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestSenseKeySpecific(t *testing.T) {
	s, err := ParseSense(h(t, "70 00 05 00 00 00 00 0a 00 00 00 00 24 00 00 cb 00 02"))
	if err != nil {
		t.Fatal(err)
	}
	fp, ok := s.FieldPointer()
	want := FieldPointer{CDB: true, BitValid: true, Bit: 3, Byte: 2}
	if !ok || fp != want {
		t.Errorf("FieldPointer() = %+v, %v; want %+v", fp, ok, want)
	}
	if _, ok := s.Progress(); ok {
		t.Error("Progress() ok for ILLEGAL REQUEST")
	}
	s, err = ParseSense(h(t, "70 00 02 00 00 00 00 0a 00 00 00 00 04 04 00 80 40 00"))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := s.Progress(); !ok || p != 0x4000 {
		t.Errorf("Progress() = %#x, %v; want 0x4000 (25%%)", p, ok)
	}
	if _, ok := s.FieldPointer(); ok {
		t.Error("FieldPointer() ok for NOT READY")
	}
}

func TestMarshalSenseFixedBytes(t *testing.T) {
	s := Sense{ResponseCode: SenseFixedCurrent, Key: KeyIllegalRequest, ASC: 0x21}
	want := h(t, "70 00 05 00 00 00 00 0a 00 00 00 00 21 00 00 00 00 00")
	if got := s.Marshal(); !bytes.Equal(got, want) {
		t.Errorf("got  % x\nwant % x", got, want)
	}
	d := Sense{ResponseCode: SenseDescriptorCurrent, Key: KeyMediumError, ASC: 0x11, Info: 7, InfoValid: true}
	want = h(t, "72 03 11 00 00 00 00 0c 00 0a 80 00 00 00 00 00 00 00 00 07")
	if got := d.Marshal(); !bytes.Equal(got, want) {
		t.Errorf("got  % x\nwant % x", got, want)
	}
}

func TestParseSenseSegment(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr error
	}{
		{"empty segment", "", "", nil},
		{"sense", "00 04 70 00 05 00", "70 00 05 00", nil},
		{"sense then response data", "00 02 70 00 aa bb", "70 00", nil},
		{"zero length", "00 00", "", nil},
		{"one byte", "00", "", ErrShortData},
		{"length past end", "00 08 70 00 05", "", ErrShortData},
	}
	for _, tt := range tests {
		got, err := ParseSenseSegment(h(t, tt.in))
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.wantErr)
			continue
		}
		if !bytes.Equal(got, h(t, tt.want)) {
			t.Errorf("%s: got % x, want %s", tt.name, got, tt.want)
		}
	}
}

func TestSenseErrorText(t *testing.T) {
	tests := []struct {
		err  SenseError
		want string
	}{
		{SenseError{Status: StatusCheckCondition, Key: KeyMediumError, ASC: 0x11},
			"MEDIUM ERROR: unrecovered read error (asc 0x11 ascq 0x00)"},
		{SenseError{Status: StatusCheckCondition, Key: KeyIllegalRequest, ASC: 0x21},
			"ILLEGAL REQUEST: logical block address out of range (asc 0x21 ascq 0x00)"},
		{SenseError{Status: StatusCheckCondition, Key: KeyMediumError, ASC: 0x11, Info: 0x2a, InfoValid: true},
			"MEDIUM ERROR: unrecovered read error (asc 0x11 ascq 0x00 information 0x2a)"},
		{SenseError{Status: StatusCheckCondition, Key: KeyHardwareError, ASC: 0x44, Deferred: true},
			"deferred HARDWARE ERROR: internal target failure (asc 0x44 ascq 0x00)"},
		{SenseError{Status: StatusBusy, Key: KeyNotReady, ASC: 0x04, ASCQ: 0x01},
			"BUSY: NOT READY: logical unit is in process of becoming ready (asc 0x04 ascq 0x01)"},
		{SenseError{Status: StatusCheckCondition, Key: KeyIllegalRequest, ASC: 0x55, ASCQ: 0x99},
			"ILLEGAL REQUEST: vendor specific additional sense code (asc 0x55 ascq 0x99)"},
		{SenseError{Status: StatusCheckCondition, Key: KeyAbortedCommand, ASC: 0x7e, ASCQ: 0x01},
			"ABORTED COMMAND: unknown additional sense code (asc 0x7e ascq 0x01)"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

func TestSenseErrorClassification(t *testing.T) {
	cc := StatusCheckCondition
	tests := []struct {
		name      string
		err       SenseError
		errno     syscall.Errno
		retryable bool
		ua        bool
	}{
		{"space allocation failed", SenseError{Status: cc, Key: KeyDataProtect, ASC: 0x27, ASCQ: 0x07}, syscall.ENOSPC, false, false},
		{"write protected", SenseError{Status: cc, Key: KeyDataProtect, ASC: 0x27}, syscall.EREMOTEIO, false, false},
		{"unrecovered read error", SenseError{Status: cc, Key: KeyMediumError, ASC: 0x11}, syscall.ENODATA, false, false},
		{"write error", SenseError{Status: cc, Key: KeyMediumError, ASC: 0x0c}, syscall.EIO, false, false},
		{"hardware error", SenseError{Status: cc, Key: KeyHardwareError, ASC: 0x44}, syscall.EREMOTEIO, false, false},
		{"LBA out of range", SenseError{Status: cc, Key: KeyIllegalRequest, ASC: 0x21}, syscall.EREMOTEIO, false, false},
		{"invalid opcode", SenseError{Status: cc, Key: KeyIllegalRequest, ASC: 0x20}, syscall.EREMOTEIO, false, false},
		{"invalid field in CDB", SenseError{Status: cc, Key: KeyIllegalRequest, ASC: 0x24}, syscall.EREMOTEIO, false, false},
		{"LUN not supported", SenseError{Status: cc, Key: KeyIllegalRequest, ASC: 0x25}, syscall.EIO, false, false},
		{"guard check failed", SenseError{Status: cc, Key: KeyIllegalRequest, ASC: 0x10, ASCQ: 0x01}, syscall.EILSEQ, false, false},
		{"power on reset", SenseError{Status: cc, Key: KeyUnitAttention, ASC: 0x29}, syscall.EIO, true, true},
		{"capacity changed", SenseError{Status: cc, Key: KeyUnitAttention, ASC: 0x2a, ASCQ: 0x09}, syscall.EIO, true, true},
		{"reported LUNs changed", SenseError{Status: cc, Key: KeyUnitAttention, ASC: 0x3f, ASCQ: 0x0e}, syscall.EIO, true, true},
		{"becoming ready", SenseError{Status: cc, Key: KeyNotReady, ASC: 0x04, ASCQ: 0x01}, syscall.EIO, true, false},
		{"ALUA transition", SenseError{Status: cc, Key: KeyNotReady, ASC: 0x04, ASCQ: 0x0a}, syscall.EIO, true, false},
		{"medium not present", SenseError{Status: cc, Key: KeyNotReady, ASC: 0x3a}, syscall.EIO, false, false},
		{"not ready manual intervention", SenseError{Status: cc, Key: KeyNotReady, ASC: 0x04, ASCQ: 0x03}, syscall.EIO, false, false},
		{"aborted command", SenseError{Status: cc, Key: KeyAbortedCommand, ASC: 0x47, ASCQ: 0x05}, syscall.EIO, true, false},
		{"aborted command PI", SenseError{Status: cc, Key: KeyAbortedCommand, ASC: 0x10, ASCQ: 0x03}, syscall.EILSEQ, false, false},
		{"miscompare", SenseError{Status: cc, Key: KeyMiscompare, ASC: 0x1d}, syscall.EREMOTEIO, false, false},
		{"deferred unit attention", SenseError{Status: cc, Key: KeyUnitAttention, ASC: 0x29, Deferred: true}, syscall.EIO, false, true},
		{"reservation conflict with sense", SenseError{Status: StatusReservationConflict}, syscall.EBADE, false, false},
		{"busy with sense", SenseError{Status: StatusBusy, Key: KeyNoSense}, syscall.EIO, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Errno(); got != tt.errno {
				t.Errorf("Errno() = %v, want %v", got, tt.errno)
			}
			if got := tt.err.Retryable(); got != tt.retryable {
				t.Errorf("Retryable() = %v, want %v", got, tt.retryable)
			}
			if got := tt.err.UnitAttention(); got != tt.ua {
				t.Errorf("UnitAttention() = %v, want %v", got, tt.ua)
			}
		})
	}
}

func TestSenseKeyString(t *testing.T) {
	for k, want := range map[SenseKey]string{
		KeyNoSense: "NO SENSE", KeyIllegalRequest: "ILLEGAL REQUEST", KeyUnitAttention: "UNIT ATTENTION",
		KeyAbortedCommand: "ABORTED COMMAND", KeyCompleted: "COMPLETED", 0x10: "sense key 0x10",
	} {
		if got := k.String(); got != want {
			t.Errorf("SenseKey(%d).String() = %q, want %q", k, got, want)
		}
	}
}
