package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// Command is one SCSI command for Session.Do.
type Command struct {
	LUN [8]byte
	CDB []byte // at most 16 bytes
	// Read receives the data the target returns; Write is the data sent.
	// At most one of them may be set.
	Read, Write []byte
	Attr        uint8 // task attribute; 0 means SIMPLE
}

// Result is the outcome of a SCSI command at the transport level.
type Result struct {
	Status uint8
	// Sense is the sense data for CHECK CONDITION.
	Sense []byte
	// Residual and its direction: Underflow means Residual bytes of the
	// expected transfer did not move; Overflow means the target had more.
	Residual            uint32
	Underflow, Overflow bool
	// Response is the iSCSI response code; always 0 (command completed at
	// target) in a Result that Do returns, which fails any other with a
	// *ResponseError.
	Response uint8
}

// Transferred is how many bytes of the expected transfer moved.
func (r *Result) Transferred(expected int) int {
	if r.Underflow {
		return max(0, expected-int(r.Residual))
	}
	return expected
}

// tmfTimeout bounds each task management request of the error handling
// (ABORT TASK, LOGICAL UNIT RESET); a shorter command timeout bounds them
// instead.
const tmfTimeout = 10 * time.Second

// Do runs a SCSI command and waits for its status. The returned error
// covers transport and protocol failures, and a target that did not
// complete the command (*ResponseError); SCSI status is in Result.
//
// A command without status after the command timeout (SessionConfig), or
// whose ctx ends first, is ended at the target as open-iscsi does: ABORT
// TASK; when that fails or is not answered in time, LOGICAL UNIT RESET
// (which ends every command on the LUN; they return ErrTaskAborted); when
// that fails too, the session is dropped and the command returns the
// session error once the connection is torn down. A timed-out command's
// error wraps ErrCommandTimeout, and ErrTaskAborted when a task management
// function ended it (a Nexus then issues it again, a bounded number of
// times). Either way Do returns only when the target can no longer move
// data for the command: the buffers are not touched after Do returns.
func (s *Session) Do(ctx context.Context, c *Command) (*Result, error) {
	if len(c.CDB) == 0 || len(c.CDB) > 16 {
		return nil, fmt.Errorf("scsi command: CDB of %d bytes (1 to 16 supported)", len(c.CDB))
	}
	if len(c.Read) > 0 && len(c.Write) > 0 {
		return nil, errors.New("scsi command: bidirectional commands are not supported")
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.failed:
		return nil, s.Err()
	}
	defer func() { <-s.slots }()

	t := &Task{LUN: c.LUN, Read: c.Read, Write: c.Write}
	cmd := pdu.SCSICommand{Final: true, Read: len(c.Read) > 0, Write: len(c.Write) > 0,
		Attr: c.Attr, LUN: c.LUN, ExpectedDataTransferLength: uint32(len(c.Read) + len(c.Write))}
	if cmd.Attr == pdu.AttrUntagged {
		cmd.Attr = pdu.AttrSimple
	}
	copy(cmd.CDB[:], c.CDB)
	if cp, ok := s.dm.(CommandPreparer); ok {
		if err := cp.PrepareCommand(t); err != nil {
			return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
		}
	}
	var sentCmdSN uint32
	handed := false
	p, err := s.issue(ctx, false, t, func(itt, cmdSN, expStatSN uint32) error {
		cmd.ITT, cmd.CmdSN, cmd.ExpStatSN = itt, cmdSN, expStatSN
		sentCmdSN, handed = cmdSN, true
		return s.dm.SendCommand(&cmd, t)
	})
	if err != nil {
		if handed && s.dead.Load() {
			<-s.released // the datamover may have posted it: wait for teardown
		}
		s.dm.TaskDone(t) // returns a reservation never sent
		return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
	}
	var expire <-chan time.Time
	if s.cfg.CommandTimeout > 0 {
		timer := time.NewTimer(s.cfg.CommandTimeout)
		defer timer.Stop()
		expire = timer.C
	}
	var resp *pdu.PDU
	select {
	case <-p.done:
		resp, err = p.resp, p.err
	case <-expire:
		s.timeouts.Add(1)
		s.log.Warn().Uint8("op", c.CDB[0]).Uint32("itt", p.itt).Dur("timeout", s.cfg.CommandTimeout).
			Msg("scsi command timed out: aborting it")
		resp, err = s.endTask(p, c.LUN, sentCmdSN, "timed out")
		if resp == nil {
			err = fmt.Errorf("no status within %v: %w: %w", s.cfg.CommandTimeout, ErrCommandTimeout, err)
		}
	case <-ctx.Done():
		resp, err = s.endTask(p, c.LUN, sentCmdSN, "cancelled")
		if resp == nil {
			err = ctx.Err()
		}
	}
	s.dm.TaskDone(t)
	if err != nil {
		return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
	}
	r, err := decodeStatus(resp)
	if err != nil {
		s.fail(err)
		return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
	}
	if r.Response != pdu.RespCommandCompleted {
		return nil, fmt.Errorf("scsi command 0x%02x: ITT 0x%x: %w", c.CDB[0], t.ITT, &ResponseError{Response: r.Response})
	}
	if t.DataCounted && len(c.Read) > 0 {
		if err := r.checkReceived(resp.BHS.Opcode(), t, len(c.Read)); err != nil {
			s.fail(err)
			return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
		}
	}
	if !t.DataCounted && len(c.Read) > 0 && r.Status == uint8(scsi.StatusCheckCondition) &&
		scsi.CheckStatus(scsi.Status(r.Status), r.Sense) == nil {
		// A RECOVERED ERROR on a read whose Data-In nobody counted (iSER:
		// RDMA placement): the target may have stopped early without
		// saying so in the residual, leaving stale bytes in the buffer.
		return nil, fmt.Errorf("scsi command 0x%02x: ITT 0x%x: %w", c.CDB[0], t.ITT, ErrUnverifiedRead)
	}
	return r, nil
}

// ErrUnverifiedRead is returned by Do for a read that ended in CHECK
// CONDITION with RECOVERED ERROR over a datamover that cannot count the
// bytes placed (iSER): the status does not vouch for the buffer, so the
// read is not trusted. The session is sound; a LUN retries the read.
var ErrUnverifiedRead = errors.New("read ended in RECOVERED ERROR and its data cannot be verified")

// endTask ends the task behind p, whose caller stopped waiting for it,
// and returns only when the target can no longer move its data: ABORT
// TASK; failing that LOGICAL UNIT RESET; failing that the session is
// dropped and p released after the teardown. It returns p's response when
// the status arrived meanwhile, an error wrapping ErrTaskAborted when a
// task management function ended the task, else the session error.
// Error handling runs for one command at a time per LUN; a command whose
// status (or a reset, or the session's end) arrives while it waits for
// its turn returns at once, without error handling.
func (s *Session) endTask(p *pending, lun [8]byte, cmdSN uint32, why string) (*pdu.PDU, error) {
	turn := s.ehTurn(lun)
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-p.done:
		return p.resp, p.err
	}
	tmo := tmfTimeout
	if s.cfg.CommandTimeout > 0 {
		tmo = min(tmo, s.cfg.CommandTimeout)
	}
	if s.waiting(p) {
		_, err := s.tmf(tmo, pdu.TMFAbortTask, lun, p.itt, cmdSN)
		if err == nil {
			// The task is gone at the target; a status sent before the
			// TMF response has been dispatched already.
			if s.take(p) {
				p.task.ended = true
				return nil, fmt.Errorf("ABORT TASK: %w", ErrTaskAborted)
			}
			<-p.done
			return p.resp, p.err
		}
		s.log.Warn().Err(err).Uint32("itt", p.itt).Msg("abort task failed: resetting the logical unit")
	}
	if s.waiting(p) {
		resetSN, err := s.tmf(tmo, pdu.TMFLogicalUnitReset, lun, pdu.ReservedTag, 0)
		if err == nil {
			s.endLUNTasks(lun, resetSN, fmt.Errorf("LOGICAL UNIT RESET: %w", ErrTaskAborted))
			<-p.done
			return p.resp, p.err
		}
		s.log.Warn().Err(err).Uint32("itt", p.itt).Msg("logical unit reset failed: dropping the session")
	}
	if s.waiting(p) {
		s.fail(fmt.Errorf("scsi command %s (ITT 0x%x) and neither ABORT TASK nor LOGICAL UNIT RESET ended it: dropping the session", why, p.itt))
	}
	<-p.done // a response, a reset, or the session's end (after the teardown)
	return p.resp, p.err
}

// ehTurn returns lun's error-handling lock: a channel of one slot, held
// (filled) by the command whose error handling runs on the LUN, so a
// waiter can give up when its own command ends meanwhile.
func (s *Session) ehTurn(lun [8]byte) chan struct{} {
	s.ehMu.Lock()
	defer s.ehMu.Unlock()
	turn := s.ehLUN[lun]
	if turn == nil {
		if s.ehLUN == nil {
			s.ehLUN = make(map[[8]byte]chan struct{})
		}
		turn = make(chan struct{}, 1)
		s.ehLUN[lun] = turn
	}
	return turn
}

// waiting reports whether p still waits for its response.
func (s *Session) waiting(p *pending) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pend[p.itt] == p
}

// tmf runs one task management function, bounded by tmo.
func (s *Session) tmf(tmo time.Duration, fn uint8, lun [8]byte, refITT, refCmdSN uint32) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tmo)
	defer cancel()
	return s.taskManagement(ctx, fn, lun, refITT, refCmdSN)
}

// decodeStatus turns a SCSI Response or a Data-In with status into a Result.
func decodeStatus(p *pdu.PDU) (*Result, error) {
	switch p.BHS.Opcode() {
	case pdu.OpDataIn:
		var d pdu.DataIn
		if err := d.Unmarshal(&p.BHS); err != nil {
			return nil, err
		}
		return &Result{Status: d.Status, Residual: d.ResidualCount, Underflow: d.Underflow, Overflow: d.Overflow}, nil
	case pdu.OpSCSIResponse:
		var r pdu.SCSIResponse
		if err := r.Unmarshal(&p.BHS); err != nil {
			return nil, err
		}
		res := &Result{Status: r.Status, Residual: r.ResidualCount, Underflow: r.Underflow,
			Overflow: r.Overflow, Response: r.Response}
		if r.Response != pdu.RespCommandCompleted {
			return res, nil
		}
		if len(p.Data) >= 2 {
			n := int(binary.BigEndian.Uint16(p.Data))
			if n > len(p.Data)-2 {
				return nil, pdu.ProtocolErrorf(pdu.OpSCSIResponse, "sense length %d exceeds the %d-byte data segment", n, len(p.Data))
			}
			res.Sense = p.Data[2 : 2+n]
		} else if len(p.Data) == 1 {
			return nil, pdu.ProtocolErrorf(pdu.OpSCSIResponse, "1-byte data segment")
		}
		return res, nil
	}
	return nil, pdu.ProtocolErrorf(p.BHS.Opcode(), "not a status PDU")
}

// ResponseError is a SCSI Response whose iSCSI Response field is not
// Command Completed at Target (RFC 7143 11.4.3): the target failed the
// command, and its status and sense data are not valid. The session is
// still sound, so it stays up and the command is not reissued on another
// one; as Linux does for DID_ERROR, the LUN retries it a few times.
type ResponseError struct {
	Response uint8 // the iSCSI Response code, e.g. RespTargetFailure
}

// Error names the response code.
func (e *ResponseError) Error() string {
	if e.Response == pdu.RespTargetFailure {
		return "iscsi response 0x01: target failure"
	}
	return fmt.Sprintf("iscsi response 0x%02x: command not completed at target", e.Response)
}

// checkReceived compares the Data-In bytes placed for a read of expected
// bytes with what the status says moved. With GOOD status a difference is
// a protocol error. With another status the target may have stopped early
// without saying so in the residual; the Result is then made to claim no
// more than arrived, so that a caller accepting the status (a RECOVERED
// ERROR) sees a short transfer rather than stale buffer bytes.
func (r *Result) checkReceived(op pdu.Opcode, t *Task, expected int) error {
	want := r.Transferred(expected)
	got := int(t.Received)
	switch {
	case got == want:
		return nil
	case r.Status == 0:
		return pdu.ProtocolErrorf(op, "ITT 0x%x: %d bytes of Data-In for a %d-byte transfer", t.ITT, got, want)
	case got < want:
		r.Underflow, r.Overflow, r.Residual = true, false, uint32(expected-got)
	}
	return nil
}
