package initiator

import (
	"fmt"
	"slices"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// This file holds the session's deadlines and error handling: the watchdog
// that finds timed-out commands and a window closed too long, and the
// per-LUN error-handling goroutines that end abandoned tasks at the target.

// ehReq asks the error handler to end the task at idx (while it still has
// itt).
type ehReq struct {
	idx   int
	itt   uint32
	lun   [8]byte
	cmdSN uint32
}

// armLocked sets the watchdog when it is not set. Deadlines are the
// command timeout after a task was sent or queued for the window, so they
// come in the order tasks are added: a set watchdog fires at the oldest.
func (s *Session) armLocked() {
	if !s.wdArmed && s.cfg.CommandTimeout > 0 && s.err == nil {
		s.watchdog.Reset(s.cfg.CommandTimeout)
		s.wdArmed = true
	}
}

// checkDeadlines runs when the watchdog fires. Commands sent a command
// timeout ago go to the error handler; a command that waited a command
// timeout for the window fails the session, unless commands are
// outstanding: their own error handling moves the window or drops the
// session, so the wait starts again.
func (s *Session) checkDeadlines() {
	s.mu.Lock()
	s.wdArmed = false
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	ct := s.cfg.CommandTimeout
	var next time.Time
	for h := s.tt.head; h >= 0; h = s.tt.head {
		t := &s.tt.tasks[h]
		if now.Sub(t.since) < ct {
			next = t.since.Add(ct)
			break
		}
		s.tt.unlink(int(h))
		t.state, t.why = taskEH, whyTimedOut
		s.queueEHLocked(ehReq{idx: int(h), itt: t.itt, lun: t.dt.LUN, cmdSN: t.cmdSN})
		s.timeouts.Add(1)
		s.log.Warn().Uint8("op", t.cmd.CDB[0]).Uint32("itt", t.itt).Dur("timeout", ct).
			Msg("scsi command timed out: aborting it")
	}
	closed := false
	if w := s.tt.peekWindow(); w >= 0 {
		t := &s.tt.tasks[w]
		if now.Sub(t.since) >= ct {
			if s.tt.outstanding > 0 {
				t.since = now
			} else {
				closed = true
			}
		}
		if d := t.since.Add(ct); !closed && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	maxCmdSN, cmdSN := s.maxCmdSN, s.cmdSN
	if !next.IsZero() && !closed {
		s.watchdog.Reset(time.Until(next))
		s.wdArmed = true
	}
	s.mu.Unlock()
	if closed {
		s.windowClosed(maxCmdSN, cmdSN)
	}
}

// cancel hands the command at idx (while it has itt) whose Do caller gave
// up to the error handler; a command still waiting for the window ends at
// once.
func (s *Session) cancel(idx int, itt uint32, cause error) {
	s.mu.Lock()
	t := &s.tt.tasks[idx]
	if t.itt != itt {
		s.mu.Unlock()
		return
	}
	switch t.state {
	case taskWindow:
		s.tt.removeWindow(idx)
		t.why, t.cancelErr = whyCancelled, cause
		s.endLocked(idx, nil, cause)
		s.mu.Unlock()
		s.finish(idx)
		return
	case taskSent:
		s.tt.unlink(idx)
		t.state, t.why, t.cancelErr = taskEH, whyCancelled, cause
		s.queueEHLocked(ehReq{idx: idx, itt: itt, lun: t.dt.LUN, cmdSN: t.cmdSN})
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
}

// queueEHLocked hands a task to the error handling of its LUN, starting
// that LUN's handler when none runs. Error handling runs for one command at
// a time per LUN: a LUN's escalation does not wait behind another's.
func (s *Session) queueEHLocked(r ehReq) {
	s.ehq = append(s.ehq, r)
	if s.err != nil || s.ehBusy[r.lun] {
		return
	}
	if s.ehBusy == nil {
		s.ehBusy = make(map[[8]byte]bool)
	}
	s.ehBusy[r.lun] = true
	s.wg.Add(1)
	go s.errorHandler(r.lun)
}

// errorHandler ends lun's tasks handed to error handling, one at a time,
// until none is left or the session ends (the teardown then releases what
// is left).
func (s *Session) errorHandler(lun [8]byte) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		k := slices.IndexFunc(s.ehq, func(r ehReq) bool { return r.lun == lun })
		if k < 0 || s.err != nil {
			delete(s.ehBusy, lun)
			s.mu.Unlock()
			return
		}
		r := s.ehq[k]
		s.ehq = slices.Delete(s.ehq, k, k+1)
		s.mu.Unlock()
		s.endTask(r)
	}
}

// live reports whether the task of r still waits for error handling, and
// why its waiter stopped waiting.
func (s *Session) live(r ehReq) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.tt.tasks[r.idx]
	return s.err == nil && t.itt == r.itt && t.state == taskEH, t.why
}

// endTask ends the task of r, whose caller stopped waiting for it, so that
// the target can no longer move its data: ABORT TASK; failing that LOGICAL
// UNIT RESET; failing that the session is dropped and the task released
// after the teardown. A status that arrives meanwhile completes the task
// as usual.
func (s *Session) endTask(r ehReq) {
	tmo := tmfTimeout
	if s.cfg.CommandTimeout > 0 {
		tmo = min(tmo, s.cfg.CommandTimeout)
	}
	if ok, _ := s.live(r); ok {
		_, err := s.tmf(tmo, pdu.TMFAbortTask, r.lun, r.itt, r.cmdSN)
		if err == nil {
			// The task is gone at the target; a status sent before the
			// TMF response has been dispatched already.
			s.mu.Lock()
			t := &s.tt.tasks[r.idx]
			if s.err == nil && t.itt == r.itt && t.state == taskEH {
				s.endLocked(r.idx, nil, fmt.Errorf("ABORT TASK: %w", ErrTaskAborted))
				t.dt.ended = true
				s.mu.Unlock()
				s.finish(r.idx)
				return
			}
			s.mu.Unlock()
			return
		}
		s.log.Warn().Err(err).Uint32("itt", r.itt).Msg("abort task failed: resetting the logical unit")
	}
	if ok, _ := s.live(r); ok {
		resetSN, err := s.tmf(tmo, pdu.TMFLogicalUnitReset, r.lun, pdu.ReservedTag, 0)
		if err == nil {
			s.endLUNTasks(r.lun, resetSN, fmt.Errorf("LOGICAL UNIT RESET: %w", ErrTaskAborted))
			return
		}
		s.log.Warn().Err(err).Uint32("itt", r.itt).Msg("logical unit reset failed: dropping the session")
	}
	if ok, why := s.live(r); ok {
		s.fail(fmt.Errorf("scsi command %s (ITT 0x%x) and neither ABORT TASK nor LOGICAL UNIT RESET ended it: dropping the session", why, r.itt))
	}
}
