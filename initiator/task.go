package initiator

import (
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// This file holds the session's task array: every request in flight (SCSI
// commands and control requests) has an entry, found by the index in its
// ITT. All fields are guarded by Session.mu unless a comment says
// otherwise.

// ctlSlots is the number of task entries for control requests (NOP-Out,
// task management, logout), after the QueueDepth entries for commands.
const ctlSlots = 16

// ITT layout: the low 16 bits are the task's index, the high 16 bits a
// generation that changes with every use of the index, so that a late
// answer for an earlier use of the index is told apart (and dropped).
const ittIndexBits = 16

func makeITT(gen uint16, idx int) uint32 { return uint32(gen)<<ittIndexBits | uint32(idx) }
func ittIndex(itt uint32) int            { return int(itt & (1<<ittIndexBits - 1)) }

type taskState uint8

const (
	taskFree      taskState = iota
	taskPrep                // a SCSI command being prepared (CommandPreparer) by its starter
	taskWindow              // a SCSI command waiting for the CmdSN window
	taskSent                // handed to the datamover, waiting for its answer
	taskEH                  // its waiter stopped waiting (timeout, cancel): error handling runs
	taskAbandoned           // a control request whose waiter gave up: held until its late answer
	taskDone                // answered or ended; its waiter or callback has not finished with it
)

// Tag is the caller's name for a command started with Submit, handed back
// to its CommandDone.
type Tag uint16

// CommandDone receives the end of a command started with Session.Submit or
// Nexus.Submit.
type CommandDone interface {
	// CommandDone reports the end of the command submitted with tag. r
	// is valid only during the call (nil when err is not); err is what
	// Session.Do would return. It runs on the goroutine that ended the
	// command: the session's reader for a status, else an error handler,
	// the session's failure or teardown, or Submit's caller for a command
	// that could not start. It must not block; it may call Submit.
	CommandDone(tag Tag, r *Result, err error)
}

// task is one entry of the task array.
type task struct {
	itt   uint32 // the ITT of its current use; 0 when free
	gen   uint16
	state taskState
	scsi  bool
	cmdSN uint32
	// since is when the task was sent (in-flight list) or queued for the
	// window (window FIFO).
	since time.Time
	// prev and next link the SCSI commands in flight in the order they
	// were sent, which is their deadline order; -1 ends the list.
	prev, next int32
	inList     bool

	cmd pdu.SCSICommand
	dt  Task // what the datamover sees of a SCSI command

	done   CommandDone // nil: a blocking waiter receives on ch
	cookie Tag
	ch     chan struct{} // capacity 1: the end of a blocking use

	resp *pdu.PDU
	err  error
	res  Result
	// why is set when the waiter stopped waiting: "timed out" or
	// "cancelled" (with the caller's error in cancelErr).
	why       string
	cancelErr error
}

const (
	whyTimedOut  = "timed out"
	whyCancelled = "cancelled"
)

// taskTable is the task array with its free lists, the window FIFO and the
// in-flight list.
type taskTable struct {
	tasks    []task
	depth    int     // entries [0, depth) are for SCSI commands
	freeData []int32 // stacks of free indices
	freeCtl  []int32
	window   []int32 // ring of SCSI commands waiting for the window
	winHead  int
	winLen   int
	head     int32 // in-flight list, oldest first
	tail     int32
	// outstanding counts SCSI commands sent and not ended (taskSent, taskEH).
	outstanding int
}

func newTaskTable(depth int) taskTable {
	n := depth + ctlSlots
	tt := taskTable{tasks: make([]task, n), depth: depth, freeData: make([]int32, 0, depth),
		freeCtl: make([]int32, 0, ctlSlots), window: make([]int32, depth), head: -1, tail: -1}
	for i := range tt.tasks {
		tt.tasks[i].ch = make(chan struct{}, 1)
		tt.tasks[i].prev, tt.tasks[i].next = -1, -1
	}
	for i := depth - 1; i >= 0; i-- {
		tt.freeData = append(tt.freeData, int32(i))
	}
	for i := n - 1; i >= depth; i-- {
		tt.freeCtl = append(tt.freeCtl, int32(i))
	}
	return tt
}

// alloc takes a free entry from the data or the control range and gives it
// a fresh ITT; it returns -1 when the range is exhausted.
func (tt *taskTable) alloc(scsi bool) int {
	free := &tt.freeCtl
	if scsi {
		free = &tt.freeData
	}
	n := len(*free)
	if n == 0 {
		return -1
	}
	idx := int((*free)[n-1])
	*free = (*free)[:n-1]
	t := &tt.tasks[idx]
	for {
		t.gen++
		if t.itt = makeITT(t.gen, idx); t.itt != 0 && t.itt != pdu.ReservedTag {
			break
		}
	}
	t.scsi = scsi
	t.resp, t.err, t.res, t.why, t.cancelErr = nil, nil, Result{}, "", nil
	t.done, t.cookie = nil, 0
	return idx
}

// release returns an entry to its free list.
func (tt *taskTable) release(idx int) {
	t := &tt.tasks[idx]
	t.state, t.itt = taskFree, 0
	t.resp, t.done = nil, nil
	if idx < tt.depth {
		tt.freeData = append(tt.freeData, int32(idx))
	} else {
		tt.freeCtl = append(tt.freeCtl, int32(idx))
	}
}

// lookup returns the index of the task with itt, or -1 when no task in use
// has that ITT (a stale generation, a free entry, an index out of range).
func (tt *taskTable) lookup(itt uint32) int {
	idx := ittIndex(itt)
	if idx >= len(tt.tasks) || itt == pdu.ReservedTag {
		return -1
	}
	if t := &tt.tasks[idx]; t.state != taskFree && t.itt == itt {
		return idx
	}
	return -1
}

// link appends a sent SCSI command to the in-flight list.
func (tt *taskTable) link(idx int) {
	t := &tt.tasks[idx]
	t.prev, t.next, t.inList = tt.tail, -1, true
	if tt.tail >= 0 {
		tt.tasks[tt.tail].next = int32(idx)
	} else {
		tt.head = int32(idx)
	}
	tt.tail = int32(idx)
}

// unlink removes a task from the in-flight list, if it is on it.
func (tt *taskTable) unlink(idx int) {
	t := &tt.tasks[idx]
	if !t.inList {
		return
	}
	if t.prev >= 0 {
		tt.tasks[t.prev].next = t.next
	} else {
		tt.head = t.next
	}
	if t.next >= 0 {
		tt.tasks[t.next].prev = t.prev
	} else {
		tt.tail = t.prev
	}
	t.prev, t.next, t.inList = -1, -1, false
}

func (tt *taskTable) pushWindow(idx int) {
	tt.window[(tt.winHead+tt.winLen)%len(tt.window)] = int32(idx)
	tt.winLen++
}

func (tt *taskTable) peekWindow() int {
	if tt.winLen == 0 {
		return -1
	}
	return int(tt.window[tt.winHead])
}

func (tt *taskTable) popWindow() {
	tt.winHead = (tt.winHead + 1) % len(tt.window)
	tt.winLen--
}

// removeWindow takes idx out of the window FIFO, keeping the others' order.
func (tt *taskTable) removeWindow(idx int) {
	n := len(tt.window)
	k := 0
	for i := 0; i < tt.winLen; i++ {
		v := tt.window[(tt.winHead+i)%n]
		if int(v) == idx {
			continue
		}
		tt.window[(tt.winHead+k)%n] = v
		k++
	}
	tt.winLen = k
}
