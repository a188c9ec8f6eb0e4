package scsi

import (
	"errors"
	"syscall"
	"testing"
)

func TestCheckStatus(t *testing.T) {
	ua := h(t, "70 00 06 00 00 00 00 0a 00 00 00 00 29 00 00 00 00 00")
	for _, s := range []Status{StatusGood, StatusConditionMet, StatusIntermediate, StatusIntermediateConditionMet} {
		if err := CheckStatus(s, nil); err != nil {
			t.Errorf("CheckStatus(%v, nil) = %v, want nil", s, err)
		}
		// Sense that comes with a good status is ignored (tgt sends stale
		// sense with GOOD after UNMAP, see TestTgtCaptures).
		if err := CheckStatus(s, ua); err != nil {
			t.Errorf("CheckStatus(%v, sense) = %v, want nil", s, err)
		}
	}

	err := CheckStatus(StatusCheckCondition, ua)
	var se *SenseError
	if !errors.As(err, &se) {
		t.Fatalf("CheckStatus(CHECK CONDITION, UA) = %v, want *SenseError", err)
	}
	if se.Key != KeyUnitAttention || se.ASC != 0x29 || se.Status != StatusCheckCondition || !se.UnitAttention() {
		t.Errorf("got %+v", se)
	}
	// Raw is a copy: reusing the receive buffer must not change it.
	ua[12] = 0x2a
	if se.Raw[12] != 0x29 {
		t.Error("SenseError.Raw aliases the sense buffer")
	}

	err = CheckStatus(StatusTaskSetFull, nil)
	var st *StatusError
	if !errors.As(err, &st) || st.Status != StatusTaskSetFull || !st.Retryable() || st.Errno() != syscall.EIO {
		t.Errorf("CheckStatus(TASK SET FULL) = %#v", err)
	}
	if err.Error() != "scsi: status TASK SET FULL" {
		t.Errorf("Error() = %q", err.Error())
	}

	var e Error
	if !errors.As(err, &e) || !e.Retryable() {
		t.Errorf("errors.As(TASK SET FULL, scsi.Error) failed: %v", err)
	}
	if !errors.As(CheckStatus(StatusCheckCondition, ua), &e) || e.Errno() != syscall.EIO {
		t.Errorf("errors.As(sense error, scsi.Error) failed")
	}

	err = CheckStatus(StatusReservationConflict, nil)
	if !errors.As(err, &st) || st.Retryable() || st.Errno() != syscall.EBADE {
		t.Errorf("CheckStatus(RESERVATION CONFLICT) = %#v", err)
	}

	err = CheckStatus(StatusCheckCondition, nil)
	if !errors.As(err, &st) || st.Status != StatusCheckCondition {
		t.Errorf("CHECK CONDITION without sense = %#v, want *StatusError", err)
	}

	// Unreadable sense: both the status and the parse error are visible.
	err = CheckStatus(StatusCheckCondition, []byte{0x7f, 0, 5})
	if !errors.As(err, &st) || !errors.Is(err, ErrMalformed) || errors.As(err, &se) {
		t.Errorf("CHECK CONDITION with bad sense = %v", err)
	}
}

func TestStatusError(t *testing.T) {
	tests := []struct {
		s         Status
		name      string
		retryable bool
	}{
		{StatusBusy, "BUSY", true},
		{StatusTaskSetFull, "TASK SET FULL", true},
		{StatusTaskAborted, "TASK ABORTED", true},
		{StatusACAActive, "ACA ACTIVE", false},
		{StatusReservationConflict, "RESERVATION CONFLICT", false},
		{StatusCheckCondition, "CHECK CONDITION", false},
		{StatusCommandTerminated, "COMMAND TERMINATED", false},
		{Status(0x66), "status 0x66", false},
	}
	for _, tt := range tests {
		e := &StatusError{Status: tt.s}
		if tt.s.String() != tt.name {
			t.Errorf("Status(0x%02x).String() = %q, want %q", uint8(tt.s), tt.s.String(), tt.name)
		}
		if e.Retryable() != tt.retryable {
			t.Errorf("%v: Retryable() = %v", tt.s, e.Retryable())
		}
		if tt.s.Good() {
			t.Errorf("%v: Good() = true", tt.s)
		}
	}
}

// TestCheckStatusSuccessOrNot lists which status and sense combinations
// count as a completed command. A CHECK CONDITION is success only with
// current RECOVERED ERROR sense; missing or unreadable sense is an error.
func TestCheckStatusSuccessOrNot(t *testing.T) {
	recovered := h(t, "70 00 01 00 00 00 00 0a 00 00 00 00 17 01 00 00 00 00")         // recovered data with retries
	recoveredDesc := h(t, "72 01 17 01 00 00 00 00")                                   // same, descriptor format
	recoveredShort := h(t, "70 00 01")                                                 // truncated after the key
	deferredRecovered := h(t, "71 00 01 00 00 00 00 0a 00 00 00 00 17 01 00 00 00 00") // an earlier command's
	medium := h(t, "70 00 03 00 00 00 00 0a 00 00 00 00 11 00 00 00 00 00")
	noSense := h(t, "70 00 00 00 00 00 00 0a 00 00 00 00 00 00 00 00 00 00")
	tests := []struct {
		name   string
		status Status
		sense  []byte
		ok     bool
	}{
		{"good", StatusGood, nil, true},
		{"condition met", StatusConditionMet, nil, true},
		{"recovered error", StatusCheckCondition, recovered, true},
		{"recovered error, descriptor format", StatusCheckCondition, recoveredDesc, true},
		{"recovered error, truncated sense", StatusCheckCondition, recoveredShort, true},
		{"deferred recovered error", StatusCheckCondition, deferredRecovered, false},
		{"recovered error sense with BUSY", StatusBusy, recovered, false},
		{"check condition without sense", StatusCheckCondition, nil, false},
		{"check condition, empty sense", StatusCheckCondition, []byte{}, false},
		{"check condition, unknown response code", StatusCheckCondition, h(t, "7f 00 01 00"), false},
		{"check condition, sense ends before the key", StatusCheckCondition, h(t, "70 00"), false},
		{"check condition, descriptor sense of one byte", StatusCheckCondition, h(t, "72"), false},
		{"check condition, all-zero sense", StatusCheckCondition, make([]byte, 18), false},
		{"check condition, NO SENSE", StatusCheckCondition, noSense, false},
		{"medium error", StatusCheckCondition, medium, false},
		{"reservation conflict", StatusReservationConflict, nil, false},
		{"task aborted", StatusTaskAborted, nil, false},
	}
	for _, tt := range tests {
		err := CheckStatus(tt.status, tt.sense)
		if (err == nil) != tt.ok {
			t.Errorf("%s: CheckStatus = %v, want success %v", tt.name, err, tt.ok)
			continue
		}
		var e Error
		if !tt.ok && !errors.As(err, &e) {
			t.Errorf("%s: %v is not a scsi.Error", tt.name, err)
		}
	}
}
