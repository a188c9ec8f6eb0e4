package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
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
//
// Do is Submit and a wait: it waits for a free command entry (QueueDepth)
// instead of queueing behind other Submits, and returns a copy of the
// Result.
func (s *Session) Do(ctx context.Context, c *Command) (*Result, error) {
	if err := checkCommand(c); err != nil {
		return nil, err
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.failed:
		return nil, s.Err()
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		<-s.slots
		s.mu.Unlock()
		return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
	}
	idx := s.tt.alloc(true)
	t := &s.tt.tasks[idx]
	itt := t.itt
	s.fillLocked(t, c)
	s.mu.Unlock()
	s.launch(idx)
	select {
	case <-t.ch:
	case <-ctx.Done():
		s.cancel(idx, itt, ctx.Err())
		<-t.ch
	}
	r, err := s.outcome(t)
	var out *Result
	if r != nil {
		out = new(Result)
		*out = *r
	}
	s.free(idx)
	return out, err
}

// ErrUnverifiedRead is returned by Do for a read that ended in CHECK
// CONDITION with RECOVERED ERROR over a datamover that cannot count the
// bytes placed (iSER): the status does not vouch for the buffer, so the
// read is not trusted. The session is sound; a LUN retries the read.
var ErrUnverifiedRead = errors.New("read ended in RECOVERED ERROR and its data cannot be verified")

// tmf runs one task management function, bounded by tmo.
func (s *Session) tmf(tmo time.Duration, fn uint8, lun [8]byte, refITT, refCmdSN uint32) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tmo)
	defer cancel()
	return s.taskManagement(ctx, fn, lun, refITT, refCmdSN)
}

// decodeStatus turns a SCSI Response or a Data-In with status into res.
func decodeStatus(p *pdu.PDU, res *Result) error {
	switch p.BHS.Opcode() {
	case pdu.OpDataIn:
		var d pdu.DataIn
		if err := d.Unmarshal(&p.BHS); err != nil {
			return err
		}
		*res = Result{Status: d.Status, Residual: d.ResidualCount, Underflow: d.Underflow, Overflow: d.Overflow}
		return nil
	case pdu.OpSCSIResponse:
		var r pdu.SCSIResponse
		if err := r.Unmarshal(&p.BHS); err != nil {
			return err
		}
		*res = Result{Status: r.Status, Residual: r.ResidualCount, Underflow: r.Underflow,
			Overflow: r.Overflow, Response: r.Response}
		if r.Response != pdu.RespCommandCompleted {
			return nil
		}
		if len(p.Data) >= 2 {
			n := int(binary.BigEndian.Uint16(p.Data))
			if n > len(p.Data)-2 {
				return pdu.ProtocolErrorf(pdu.OpSCSIResponse, "sense length %d exceeds the %d-byte data segment", n, len(p.Data))
			}
			res.Sense = p.Data[2 : 2+n]
		} else if len(p.Data) == 1 {
			return pdu.ProtocolErrorf(pdu.OpSCSIResponse, "1-byte data segment")
		}
		return nil
	}
	return pdu.ProtocolErrorf(p.BHS.Opcode(), "not a status PDU")
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
