package scsi

import (
	"fmt"
	"syscall"
)

// Status is the SCSI STATUS byte of a SCSI Response (SAM-5 5.3).
type Status uint8

// Status codes (SAM-5 table 46). INTERMEDIATE, INTERMEDIATE-CONDITION MET
// and COMMAND TERMINATED are obsolete but still named for logging.
const (
	StatusGood                     Status = 0x00
	StatusCheckCondition           Status = 0x02
	StatusConditionMet             Status = 0x04
	StatusBusy                     Status = 0x08
	StatusIntermediate             Status = 0x10
	StatusIntermediateConditionMet Status = 0x14
	StatusReservationConflict      Status = 0x18
	StatusCommandTerminated        Status = 0x22
	StatusTaskSetFull              Status = 0x28
	StatusACAActive                Status = 0x30
	StatusTaskAborted              Status = 0x40
)

var statusNames = map[Status]string{
	StatusGood:                     "GOOD",
	StatusCheckCondition:           "CHECK CONDITION",
	StatusConditionMet:             "CONDITION MET",
	StatusBusy:                     "BUSY",
	StatusIntermediate:             "INTERMEDIATE",
	StatusIntermediateConditionMet: "INTERMEDIATE-CONDITION MET",
	StatusReservationConflict:      "RESERVATION CONFLICT",
	StatusCommandTerminated:        "COMMAND TERMINATED",
	StatusTaskSetFull:              "TASK SET FULL",
	StatusACAActive:                "ACA ACTIVE",
	StatusTaskAborted:              "TASK ABORTED",
}

// String returns the status name as SAM-5 spells it, or its hex value.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status 0x%02x", uint8(s))
}

// Good reports whether the status means the command completed: GOOD,
// CONDITION MET and the obsolete intermediate statuses, as Linux's
// scsi_status_is_good counts them.
func (s Status) Good() bool {
	switch s {
	case StatusGood, StatusConditionMet, StatusIntermediate, StatusIntermediateConditionMet:
		return true
	}
	return false
}

// retryable reports whether the status alone says a retry can succeed:
// the task set was full, the logical unit busy, or the task aborted by
// another I_T nexus (Linux requeues all three).
func (s Status) retryable() bool {
	switch s {
	case StatusBusy, StatusTaskSetFull, StatusTaskAborted:
		return true
	}
	return false
}

// errno maps a status other than CHECK CONDITION the way Linux's
// scsi_result_to_blk_status and blk_status_to_errno do: a reservation
// conflict is EBADE (BLK_STS_RESV_CONFLICT), anything else EIO.
func (s Status) errno() syscall.Errno {
	if s == StatusReservationConflict {
		return syscall.EBADE
	}
	return syscall.EIO
}

// Error is what *SenseError and *StatusError have in common; get it with
// errors.As(err, &e) where e is a scsi.Error.
type Error interface {
	error
	// Retryable reports whether sending the same command again can succeed.
	Retryable() bool
	// Errno is the errno Linux would report for the failure.
	Errno() syscall.Errno
}

var (
	_ Error = (*SenseError)(nil)
	_ Error = (*StatusError)(nil)
)

// StatusError is a non-good SCSI status that came without sense data.
type StatusError struct {
	Status Status
}

func (e *StatusError) Error() string {
	return "scsi: status " + e.Status.String()
}

// Retryable reports whether repeating the command can succeed: BUSY, TASK
// SET FULL and TASK ABORTED.
func (e *StatusError) Retryable() bool { return e.Status.retryable() }

// Errno returns EBADE for RESERVATION CONFLICT and EIO otherwise, the errno
// the Linux block layer reports once it stops retrying.
func (e *StatusError) Errno() syscall.Errno { return e.Status.errno() }

// CheckStatus turns the status and sense data of a SCSI Response into an
// error. It returns nil when status.Good(). Otherwise, when sense holds
// sense data, it returns a *SenseError whose Raw is a copy of sense; when
// sense is empty, a *StatusError. When sense is present but unreadable the
// error wraps both the *StatusError and the parse error: a CHECK CONDITION
// is never success unless its sense data says so.
//
// A CHECK CONDITION with current (not deferred) sense data whose key is
// RECOVERED ERROR also returns nil: the command completed, after recovery
// the target thought worth reporting, and Linux completes it as successful.
// Whether its data moved is for the caller to check from the residual, as
// for GOOD. A deferred RECOVERED ERROR belongs to an earlier command and
// means this one was not run, so it stays an error.
func CheckStatus(status Status, sense []byte) error {
	if status.Good() {
		return nil
	}
	if len(sense) == 0 {
		return &StatusError{Status: status}
	}
	s, err := ParseSense(sense)
	if err != nil {
		return fmt.Errorf("check status: %w; %w", &StatusError{Status: status}, err)
	}
	if status == StatusCheckCondition && s.Key == KeyRecoveredError && !s.Deferred() {
		return nil
	}
	return s.err(status, sense)
}
