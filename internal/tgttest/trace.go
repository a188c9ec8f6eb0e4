package tgttest

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"sync"
)

// CommandCount says how far SCSI commands with one operation code got
// inside tgtd.
type CommandCount struct {
	// Queued counts commands that reached tgtd's SCSI layer
	// (target_cmd_queue), whatever their outcome: a command refused with
	// CHECK CONDITION (say UNMAP on a LUN without thin provisioning, or a
	// WRITE to a read-only LUN) is Queued but not Done.
	Queued int
	// Done counts commands the backing store carried out (bs_rdwr "io
	// done": the pwrite, fdatasync or fallocate returned). Only commands
	// that touch the backing file get here: READ, WRITE, SYNCHRONIZE
	// CACHE, UNMAP, WRITE SAME, ...; INQUIRY and friends never do.
	Done int
	// IOErrors counts backing-store failures (bs_rdwr "io error").
	IOErrors int
}

// Command is one traced command, in arrival order.
type Command struct {
	LUN    int
	Opcode byte
}

type opKey struct {
	lun int
	op  byte
}

// These match tgt 1.0.85's dprintf lines (usr/target.c, usr/bs_rdwr.c,
// usr/mgmt.c). The "(NNN)" source line numbers are not matched so that
// other builds of tgt parse too. Matching is unanchored: worker threads
// write the "tgtd: " prefix and the message with separate calls, so lines
// can come out interleaved.
var (
	queueRE = regexp.MustCompile(`target_cmd_queue\(\d+\) (0x[0-9a-f]+|\(nil\)) ([0-9a-f]{1,2}) ([0-9a-f]+)`)
	doneRE  = regexp.MustCompile(`bs_rdwr_request\(\d+\) io done (0x[0-9a-f]+|\(nil\)) ([0-9a-f]{1,2}) `)
	errorRE = regexp.MustCompile(`bs_rdwr_request\(\d+\) io error (0x[0-9a-f]+|\(nil\)) ([0-9a-f]{1,2}) `)
	mtaskRE = regexp.MustCompile(`mtask_execute\(\d+\) -?\d+ -?\d+ -?\d+ -?\d+ (-?\d+) `)
	// usr/iscsi/session.c logs sid64(isid, tsih): ISID byte i in bits
	// 8i..8i+7, the TSIH in bits 48..63.
	sessionRE = regexp.MustCompile(`session_create\(\d+\) session_create: (0x[0-9a-f]+)`)
)

// tracer parses tgtd's output. One goroutine (run) feeds it; any number
// read it.
type tracer struct {
	mu       sync.Mutex
	counts   map[opKey]*CommandCount
	log      []Command
	cmdLUN   map[string]int // tgtd's scsi_cmd pointer -> LUN of its last queueing
	markers  map[int]chan struct{}
	isids    map[uint16][6]byte // TSIH -> ISID of every session created
	tail     []string           // last lines, for error messages
	tailNext int
}

const tailLines = 64

func newTracer() *tracer {
	return &tracer{
		counts:  map[opKey]*CommandCount{},
		cmdLUN:  map[string]int{},
		markers: map[int]chan struct{}{},
		isids:   map[uint16][6]byte{},
	}
}

// run reads r to EOF, copying every line to w if w is not nil.
func (tr *tracer) run(r io.Reader, w io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if w != nil {
			w.Write(append(line, '\n'))
		}
		tr.line(string(line))
	}
	// Drain whatever remains so tgtd never blocks on a full pipe.
	io.Copy(io.Discard, r)
}

func (tr *tracer) count(k opKey) *CommandCount {
	c := tr.counts[k]
	if c == nil {
		c = &CommandCount{}
		tr.counts[k] = c
	}
	return c
}

func (tr *tracer) line(s string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.tail) < tailLines {
		tr.tail = append(tr.tail, s)
	} else {
		tr.tail[tr.tailNext] = s
		tr.tailNext = (tr.tailNext + 1) % tailLines
	}
	for _, m := range queueRE.FindAllStringSubmatch(s, -1) {
		op, _ := strconv.ParseUint(m[2], 16, 8)
		lun, err := strconv.ParseUint(m[3], 16, 32)
		if err != nil {
			continue
		}
		k := opKey{int(lun), byte(op)}
		tr.cmdLUN[m[1]] = k.lun
		tr.count(k).Queued++
		tr.log = append(tr.log, Command{LUN: k.lun, Opcode: k.op})
	}
	for _, m := range doneRE.FindAllStringSubmatch(s, -1) {
		op, _ := strconv.ParseUint(m[2], 16, 8)
		if lun, ok := tr.cmdLUN[m[1]]; ok {
			tr.count(opKey{lun, byte(op)}).Done++
		}
	}
	for _, m := range errorRE.FindAllStringSubmatch(s, -1) {
		op, _ := strconv.ParseUint(m[2], 16, 8)
		if lun, ok := tr.cmdLUN[m[1]]; ok {
			tr.count(opKey{lun, byte(op)}).IOErrors++
		}
	}
	for _, m := range sessionRE.FindAllStringSubmatch(s, -1) {
		sid, err := strconv.ParseUint(m[1], 0, 64)
		if err != nil {
			continue
		}
		var isid [6]byte
		for i := range isid {
			isid[i] = byte(sid >> (8 * i))
		}
		tr.isids[uint16(sid>>48)] = isid
	}
	for _, m := range mtaskRE.FindAllStringSubmatch(s, -1) {
		id, _ := strconv.Atoi(m[1])
		if ch, ok := tr.markers[id]; ok {
			close(ch)
			delete(tr.markers, id)
		}
	}
}

// expect registers a marker tid that Sync waits for.
func (tr *tracer) expect(id int) <-chan struct{} {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	ch := make(chan struct{})
	tr.markers[id] = ch
	return ch
}

func (tr *tracer) forget(id int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.markers, id)
}

func (tr *tracer) get(lun int, op byte) CommandCount {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if c := tr.counts[opKey{lun, op}]; c != nil {
		return *c
	}
	return CommandCount{}
}

func (tr *tracer) commands() []Command {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]Command(nil), tr.log...)
}

// isid returns the ISID of the session tgtd created with TSIH tsih.
func (tr *tracer) isid(tsih uint16) ([6]byte, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	id, ok := tr.isids[tsih]
	return id, ok
}

func (tr *tracer) lastLines() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]string, 0, len(tr.tail))
	out = append(out, tr.tail[tr.tailNext:]...)
	return append(out, tr.tail[:tr.tailNext]...)
}
