package initiator

import (
	"errors"
	"fmt"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// This file holds a SCSI command's way through the task array: Submit and
// its backlog, preparation and start (CmdSN window), the end of a command
// and its report to its waiter (Do) or callback.

// Submit starts a SCSI command and returns at once; done.CommandDone(tag,
// …) reports its end, with what Do would return, exactly once. The command
// is copied (its CDB too); its Read or Write buffer belongs to the command
// until then. When every command entry (QueueDepth) is in use the command
// waits for one, after the Submits before it. Submit returns an error, and
// done is not called, only for an invalid command or a session that has
// ended; any other failure comes through done, which may then be called
// before Submit returns. On the common path Submit allocates nothing.
func (s *Session) Submit(c *Command, done CommandDone, tag Tag) error {
	if err := checkCommand(c); err != nil {
		return err
	}
	if done == nil {
		return errors.New("scsi command: Submit without a CommandDone")
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
	}
	if s.bhead == len(s.backlog) {
		select {
		case s.slots <- struct{}{}:
			idx := s.tt.alloc(true)
			t := &s.tt.tasks[idx]
			s.fillLocked(t, c)
			t.done, t.cookie = done, tag
			s.mu.Unlock()
			s.launch(idx)
			return nil
		default:
		}
	}
	q := queuedCmd{c: *c, done: done, cookie: tag}
	q.cdbLen = copy(q.cdb[:], c.CDB)
	q.c.CDB = nil
	s.compactBacklogLocked()
	s.backlog = append(s.backlog, q)
	s.mu.Unlock()
	return nil
}

// compactBacklogLocked moves the waiting Submits to the front of a full
// backlog when at least half of it has been taken: under a load that never
// lets the backlog drain, its storage then follows the Submits waiting
// (at most four times their peak) instead of growing by one entry per
// command. Each move copies at most as many entries as were taken since
// the last, so a Submit's cost stays constant on average.
func (s *Session) compactBacklogLocked() {
	if s.bhead == 0 || len(s.backlog) < cap(s.backlog) || s.bhead < len(s.backlog)/2 {
		return
	}
	n := copy(s.backlog, s.backlog[s.bhead:])
	clear(s.backlog[n:]) // no CommandDone kept alive by a taken entry
	s.backlog, s.bhead = s.backlog[:n], 0
}

// queuedCmd is a Submit waiting for a command entry.
type queuedCmd struct {
	c      Command // CDB in cdb
	cdb    [16]byte
	cdbLen int
	done   CommandDone
	cookie Tag
}

// takeQueuedLocked gives the oldest queued Submit the entry at idx, just
// freed, whose token it inherits; the caller launches it.
func (s *Session) takeQueuedLocked(q *queuedCmd) int {
	idx := s.tt.alloc(true)
	t := &s.tt.tasks[idx]
	q.c.CDB = q.cdb[:q.cdbLen]
	s.fillLocked(t, &q.c)
	t.done, t.cookie = q.done, q.cookie
	return idx
}

// launch starts the command prepared at idx: the datamover reserves what
// it needs first (CommandPreparer, outside the session's lock: it may
// register memory), so that a failure there ends only this command, before
// it takes a CmdSN. A datamover whose connection has ended fails the
// session instead, and the command ends with the session's error, which a
// Nexus reissues.
func (s *Session) launch(idx int) {
	t := &s.tt.tasks[idx]
	var err error
	if s.preparer != nil {
		err = s.preparer.PrepareCommand(&t.dt)
		if errors.Is(err, errConnectionEnded) {
			s.fail(fmt.Errorf("prepare command: %w", err))
			err = nil // replaced by the session's error below
		}
	}
	s.mu.Lock()
	if err == nil && s.err != nil {
		err = s.err
	}
	if err != nil {
		t.err, t.state = err, taskDone
		s.mu.Unlock()
		s.finish(idx)
		return
	}
	err = s.startLocked(idx)
	err = s.startedLocked(err)
	s.mu.Unlock()
	s.posted(true, err)
}

func checkCommand(c *Command) error {
	if len(c.CDB) == 0 || len(c.CDB) > 16 {
		return fmt.Errorf("scsi command: CDB of %d bytes (1 to 16 supported)", len(c.CDB))
	}
	if len(c.Read) > 0 && len(c.Write) > 0 {
		return errors.New("scsi command: bidirectional commands are not supported")
	}
	return nil
}

// fillLocked prepares entry t for command c.
func (s *Session) fillLocked(t *task, c *Command) {
	t.cmd = pdu.SCSICommand{Final: true, Read: len(c.Read) > 0, Write: len(c.Write) > 0,
		Attr: c.Attr, LUN: c.LUN, ExpectedDataTransferLength: uint32(len(c.Read) + len(c.Write))}
	if t.cmd.Attr == pdu.AttrUntagged {
		t.cmd.Attr = pdu.AttrSimple
	}
	copy(t.cmd.CDB[:], c.CDB)
	t.state = taskPrep
	// The task's datamover view is reused: a datamover that looked it up
	// under an earlier ITT checks ITT and done under mu before placing data.
	t.dt.mu.Lock()
	t.dt.ITT, t.dt.LUN, t.dt.Read, t.dt.Write = t.itt, c.LUN, c.Read, c.Write
	t.dt.Received, t.dt.DataCounted, t.dt.done, t.dt.ended = 0, false, false, false
	t.dt.mu.Unlock()
}

// startLocked sends the command at idx, or queues it for the CmdSN window.
// An error is a send failure: the command stays in flight (it is parked
// by the session failure the caller then causes).
func (s *Session) startLocked(idx int) error {
	t := &s.tt.tasks[idx]
	if s.tt.winLen > 0 || lt(s.maxCmdSN, s.cmdSN) {
		t.state, t.since = taskWindow, time.Now()
		s.tt.pushWindow(idx)
		s.armLocked()
		return nil
	}
	return s.sendLocked(idx)
}

// sendLocked hands the command at idx to the datamover with the next CmdSN.
func (s *Session) sendLocked(idx int) error {
	t := &s.tt.tasks[idx]
	t.cmdSN = s.cmdSN
	s.cmdSN++
	t.cmd.ITT, t.cmd.CmdSN, t.cmd.ExpStatSN = t.itt, t.cmdSN, s.expStatSN
	t.state, t.since = taskSent, time.Now()
	s.tt.outstanding++
	s.tt.link(idx)
	s.armLocked()
	return s.dm.SendCommand(&t.cmd, &t.dt)
}

// openWindowLocked sends the commands waiting for the window while it is
// open.
func (s *Session) openWindowLocked() {
	if s.err != nil {
		return
	}
	for i := s.tt.peekWindow(); i >= 0 && !lt(s.maxCmdSN, s.cmdSN); i = s.tt.peekWindow() {
		s.tt.popWindow()
		if err := s.sendLocked(i); err != nil && s.sendErr == nil {
			s.sendErr = err
		}
		s.kickPending = true
	}
}

// startedLocked collects what starting commands under the lock left to do
// once it is released: it returns the first send failure (err, or one met
// sending commands the window let through) and clears the pending kick.
func (s *Session) startedLocked(err error) error {
	if err == nil {
		err = s.sendErr
	}
	s.sendErr, s.kickPending = nil, false
	return err
}

// posted runs after the lock that started commands is released: it posts
// what the datamover batched (kick) and fails the session for a failed
// send.
func (s *Session) posted(kick bool, err error) {
	if err == nil && kick {
		err = s.kick()
	}
	if err != nil {
		s.fail(fmt.Errorf("send: %w", err))
	}
}

// endLocked ends the request at idx with resp or err; finish, called once
// the lock is released, tells its waiter.
func (s *Session) endLocked(idx int, resp *pdu.PDU, err error) {
	t := &s.tt.tasks[idx]
	if t.scsi && (t.state == taskSent || t.state == taskEH) {
		s.tt.outstanding--
	}
	s.tt.unlink(idx)
	t.resp, t.err, t.state = resp, err, taskDone
}

// finish hands an ended request to its waiter or callback. For a SCSI
// command the datamover lets go of its buffers first.
func (s *Session) finish(idx int) {
	t := &s.tt.tasks[idx]
	if !t.scsi {
		t.ch <- struct{}{}
		return
	}
	s.dm.TaskDone(&t.dt) // also returns a reservation never sent
	if t.done == nil {
		t.ch <- struct{}{}
		return
	}
	r, err := s.outcome(t)
	t.done.CommandDone(t.cookie, r, err)
	s.free(idx)
}

// free returns the entry at idx once its waiter or callback is done with it,
// and posts a queued Submit that took it over.
func (s *Session) free(idx int) {
	s.mu.Lock()
	next := s.freeLocked(idx)
	s.mu.Unlock()
	if next >= 0 {
		s.launch(next)
	}
}

// outcome turns an ended command into Do's answer; the Result lives in the
// task.
func (s *Session) outcome(t *task) (*Result, error) {
	op := t.cmd.CDB[0]
	if t.resp == nil {
		err := t.err
		switch t.why {
		case whyTimedOut:
			err = fmt.Errorf("no status within %v: %w: %w", s.cfg.CommandTimeout, ErrCommandTimeout, err)
		case whyCancelled:
			err = t.cancelErr
		}
		return nil, fmt.Errorf("scsi command 0x%02x: %w", op, err)
	}
	r := &t.res
	if err := decodeStatus(t.resp, r); err != nil {
		s.fail(err)
		return nil, fmt.Errorf("scsi command 0x%02x: %w", op, err)
	}
	if r.Response != pdu.RespCommandCompleted {
		return nil, fmt.Errorf("scsi command 0x%02x: ITT 0x%x: %w", op, t.dt.ITT, &ResponseError{Response: r.Response})
	}
	if t.dt.DataCounted && len(t.dt.Read) > 0 {
		if err := r.checkReceived(t.resp.BHS.Opcode(), &t.dt, len(t.dt.Read)); err != nil {
			s.fail(err)
			return nil, fmt.Errorf("scsi command 0x%02x: %w", op, err)
		}
	}
	if !t.dt.DataCounted && len(t.dt.Read) > 0 && r.Status == uint8(scsi.StatusCheckCondition) &&
		scsi.CheckStatus(scsi.Status(r.Status), r.Sense) == nil {
		// A RECOVERED ERROR on a read whose Data-In nobody counted (iSER:
		// RDMA placement): the target may have stopped early without
		// saying so in the residual, leaving stale bytes in the buffer.
		return nil, fmt.Errorf("scsi command 0x%02x: ITT 0x%x: %w", op, t.dt.ITT, ErrUnverifiedRead)
	}
	return r, nil
}
