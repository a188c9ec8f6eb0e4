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
