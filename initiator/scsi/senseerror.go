package scsi

import (
	"fmt"
	"syscall"
)

// SenseError is a command that ended with sense data, normally with status
// CHECK CONDITION.
type SenseError struct {
	Status    Status
	Key       SenseKey
	ASC, ASCQ uint8
	Info      uint64 // INFORMATION field, e.g. the failing LBA; see InfoValid
	InfoValid bool
	Deferred  bool   // the error belongs to an earlier command
	Raw       []byte // the sense data as received (a copy)
}

func (s *Sense) err(status Status, raw []byte) *SenseError {
	return &SenseError{
		Status:    status,
		Key:       s.Key,
		ASC:       s.ASC,
		ASCQ:      s.ASCQ,
		Info:      s.Info,
		InfoValid: s.InfoValid,
		Deferred:  s.Deferred(),
		Raw:       append([]byte(nil), raw...),
	}
}

// Error describes the error in words, for example
// "MEDIUM ERROR: unrecovered read error (asc 0x11 ascq 0x00)".
func (e *SenseError) Error() string {
	prefix := ""
	if e.Deferred {
		prefix = "deferred "
	}
	if e.Status != StatusCheckCondition {
		prefix = e.Status.String() + ": " + prefix
	}
	info := ""
	if e.InfoValid {
		info = fmt.Sprintf(" information 0x%x", e.Info)
	}
	return fmt.Sprintf("%s%v: %s (asc 0x%02x ascq 0x%02x%s)",
		prefix, e.Key, ASCString(e.ASC, e.ASCQ), e.ASC, e.ASCQ, info)
}

// UnitAttention reports whether the sense key is UNIT ATTENTION: the target
// reports a change (reset, capacity, LUN inventory, mode parameters) and did
// not run the command. Retrying runs it.
func (e *SenseError) UnitAttention() bool { return e.Key == KeyUnitAttention }

// Recovered reports whether the sense key is RECOVERED ERROR. CheckStatus
// already returns nil for a current RECOVERED ERROR under CHECK CONDITION,
// so a *SenseError it returns with this key is a deferred one (the command
// was not run) or came with another status.
func (e *SenseError) Recovered() bool { return e.Key == KeyRecoveredError }

// Retryable reports whether repeating the command can succeed, following
// the cases Linux's scsi_check_sense retries: UNIT ATTENTION; NOT READY
// with "in process of becoming ready" (04/01) or an asymmetric access
// state transition (04/0A); ABORTED COMMAND except protection information
// errors (ASC 0x10); and BUSY, TASK SET FULL or TASK ABORTED status. A
// deferred error is never retryable: the command it belongs to is gone.
func (e *SenseError) Retryable() bool {
	if e.Deferred {
		return false
	}
	if e.Status.retryable() {
		return true
	}
	switch e.Key {
	case KeyUnitAttention:
		return true
	case KeyNotReady:
		return e.ASC == 0x04 && (e.ASCQ == 0x01 || e.ASCQ == 0x0a)
	case KeyAbortedCommand:
		return e.ASC != 0x10
	}
	return false
}

// Errno returns the errno Linux reports to user space for the same sense,
// following scsi_check_sense, scsi_io_completion_action and
// blk_status_to_errno:
//
//   - DATA PROTECT with space allocation failed (27/07), the thin
//     provisioning hard threshold: ENOSPC (BLK_STS_NOSPC).
//   - MEDIUM ERROR with unrecovered read error (11), address mark not found
//     (13) or record not found (14): ENODATA (BLK_STS_MEDIUM).
//   - Protection information errors, ASC 0x10 under ILLEGAL REQUEST or
//     ABORTED COMMAND: EILSEQ (BLK_STS_PROTECTION).
//   - HARDWARE ERROR; DATA PROTECT otherwise (write protected);
//     BLANK CHECK, COPY ABORTED, VOLUME OVERFLOW, MISCOMPARE; ILLEGAL
//     REQUEST with invalid opcode (20), LBA out of range (21), invalid
//     function (22), invalid field in CDB (24), invalid field in parameter
//     list (26) or write protected (27): EREMOTEIO (BLK_STS_TARGET, a
//     "critical target error" that retrying will not fix).
//   - RESERVATION CONFLICT status: EBADE.
//   - Everything else, including UNIT ATTENTION, NOT READY and ABORTED
//     COMMAND once retries are exhausted: EIO.
//
// An NBD server has fewer error codes and should fold the ones it lacks
// into EIO.
func (e *SenseError) Errno() syscall.Errno {
	if e.Status == StatusReservationConflict {
		return syscall.EBADE
	}
	switch e.Key {
	case KeyDataProtect:
		if e.ASC == 0x27 && e.ASCQ == 0x07 {
			return syscall.ENOSPC
		}
		return syscall.EREMOTEIO
	case KeyMediumError:
		if e.ASC == 0x11 || e.ASC == 0x13 || e.ASC == 0x14 {
			return syscall.ENODATA
		}
	case KeyHardwareError, KeyBlankCheck, KeyCopyAborted, KeyVolumeOverflow, KeyMiscompare:
		return syscall.EREMOTEIO
	case KeyIllegalRequest:
		switch e.ASC {
		case 0x10:
			return syscall.EILSEQ
		case 0x20, 0x21, 0x22, 0x24, 0x26, 0x27:
			return syscall.EREMOTEIO
		}
	case KeyAbortedCommand:
		if e.ASC == 0x10 {
			return syscall.EILSEQ
		}
	}
	return syscall.EIO
}
