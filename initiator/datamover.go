package initiator

import (
	"errors"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// Datamover moves PDUs and SCSI data for one connection, after RFC 5047
// (Datamover Architecture for iSCSI). The session layer speaks only to this
// interface, so it runs unchanged over iSCSI/TCP and over iSER.
//
// Concurrency: SendPDU, SendCommand and TaskDone may be called from any
// goroutine; Recv from one goroutine (the session's reader). Close may be
// called at any time, more than once, and unblocks Recv and senders.
type Datamover interface {
	// SendPDU is Send_Control for everything but SCSI Commands: Login, Text,
	// NOP-Out, Task Management and Logout requests. The datamover adds
	// padding and digests (TCP) or the iSER header (iSER).
	SendPDU(p *pdu.PDU) error
	// SendCommand is Send_Control for a SCSI Command. t names the task's
	// buffers: the datamover sends immediate and unsolicited write data
	// within the negotiated limits and either remembers the buffers to place
	// Data-In and answer R2Ts (TCP) or advertises them to the target (iSER).
	SendCommand(cmd *pdu.SCSICommand, t *Task) error
	// Recv is Control_Notify: it returns the next PDU the session handles.
	// Data-In PDUs without status and R2Ts are consumed by the datamover; a
	// Data-In carrying status is returned (with its data already placed).
	Recv() (*pdu.PDU, error)
	// TaskDone is Deallocate_Task_Resources: after it returns the datamover
	// places no more data in t's buffers.
	TaskDone(t *Task)
	// OperationalKeys lets the datamover shape the operational keys the
	// login offers (iSER adds RDMAExtensions and drops digests).
	OperationalKeys(n *textkey.Negotiation, want Params)
	// AllocateConnectionResources runs before the final Login Request
	// (iSER posts its receive ring).
	AllocateConnectionResources(p Params) error
	// NoticeKeyValues hands the negotiated values over at the start of
	// full feature phase (Notice_Key_Values and Enable_Datamover).
	NoticeKeyValues(p Params) error
	// Transport names the datamover: "tcp" or "iser".
	Transport() string
	// RemoteAddr is the portal this connection reached.
	RemoteAddr() string
	// Close is Connection_Terminate.
	Close() error
}

// CommandPreparer is a datamover that reserves a command's resources (the
// iSER bounce slot) before the session gives the command a CmdSN. An error
// fails only that command: the session stays up, where the same error from
// SendCommand, after the CmdSN was taken, would drop it. The exception is
// an error wrapping errConnectionEnded (the connection already failed,
// before the session's reader learnt of it): the session then fails with
// it, so the command is reissued on the next session like those in flight.
// The reservation is used by SendCommand and returned by TaskDone.
type CommandPreparer interface {
	PrepareCommand(t *Task) error
}

// errConnectionEnded is wrapped by a CommandPreparer's error when the
// connection has failed or closed: a session failure, not the command's.
var errConnectionEnded = errors.New("connection ended")

// Task is one SCSI command's data, shared by the session and the datamover.
// The session reuses a Task for a later command once TaskDone has returned;
// it then changes ITT, LUN, Read and Write (and clears the rest) under the
// Task's lock, so a datamover that found the Task under an older ITT checks
// ITT and done under that lock before it touches the buffers.
type Task struct {
	ITT uint32
	LUN [8]byte
	// Read receives Data-In; its length is the expected read length.
	Read []byte
	// Write is the Data-Out source; its length is the expected write length.
	Write []byte

	// Received counts Data-In bytes placed in Read, when DataCounted says
	// the datamover sees them (TCP; under iSER the target writes directly).
	Received    uint32
	DataCounted bool

	mu   rankedMutex[taskRank] // held by the datamover while it places data: last of all (lockorder.go)
	done bool
	// ended: a task management function ended the task at the target
	// without a response (set before TaskDone); the target is done with
	// its buffers, so the datamover may reuse them.
	ended bool
}

// InlineReceiver is a datamover that can hand received PDUs to the session
// on the goroutine that reaps its completions, as a kernel initiator
// completes commands from its completion handler: the session's reader
// then only learns the end of the connection, and a command's callback
// runs one goroutine handoff earlier. The handler may start commands and
// send PDUs (the datamover never makes them wait for its own completions)
// and may fail the session, which then calls StartClose instead of Close:
// Close waits for the very goroutine the handler runs on.
type InlineReceiver interface {
	// ReceiveInline installs h for every PDU received from now on; an
	// error from h ends the connection. The PDU, its AHS and data are
	// valid only during the call: h copies what it keeps.
	ReceiveInline(h func(*pdu.PDU) error)
	// StartClose begins Close without waiting; Close finishes it.
	StartClose()
}
