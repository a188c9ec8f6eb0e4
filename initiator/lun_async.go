package initiator

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/initiator/scsi"
	"github.com/iser-attach/iser-attach/internal/freelist"
)

// This file holds the LUN's asynchronous reads and writes (blockdev.Async):
// a request is started on the caller's goroutine and continued from each
// command's CommandDone (the session's completion context), chunk by
// chunk, with the retry rules of exec (judge). Nothing on this path
// allocates or waits; what does not fit it (a write that needs a SYNCHRONIZE
// CACHE after it, an Executor without Submit) runs the blocking path on a
// goroutine.

// Submitter is an Executor that also starts commands with a completion
// callback (Session, Nexus): the LUN's asynchronous path needs one.
type Submitter interface {
	Submit(c *Command, done CommandDone, tag Tag) error
}

// lunIO is one asynchronous read or write, pooled.
type lunIO struct {
	l       *LUN
	sub     Submitter
	p       []byte // what is left to move, from lba on
	lba     uint64
	n       int // bytes of the chunk in flight
	write   bool
	fua     bool
	cdb     scsi.CDB
	cdbBuf  [16]byte // the CDB the command points to
	cmd     Command
	attempt int
	last    error
	done    blockdev.Done
	tag     uint32
}

var lunIOs freelist.List[lunIO]

// StartRead implements blockdev.Async: ReadAt, reported to done.
func (l *LUN) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	l.start(p, off, false, false, done, tag)
}

// StartWrite implements blockdev.Async: WriteAt, reported to done.
func (l *LUN) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	if l.info.WriteProtected {
		done.IODone(tag, &ioError{errors.New("write: LUN is write-protected"), syscall.EROFS})
		return
	}
	fua = fua || l.mustMakeDurable()
	if fua && !l.info.FUA && l.wc.target.Load() {
		// A write followed by SYNCHRONIZE CACHE: WriteAt's sequence.
		go func() { done.IODone(tag, l.WriteAt(context.Background(), p, off, fua)) }()
		return
	}
	l.start(p, off, true, fua && l.info.FUA, done, tag)
}

func (l *LUN) start(p []byte, off int64, write, fua bool, done blockdev.Done, tag uint32) {
	sub := l.sub
	if sub == nil {
		go func() {
			var err error
			if write {
				err = l.WriteAt(context.Background(), p, off, fua)
			} else {
				err = l.ReadAt(context.Background(), p, off)
			}
			done.IODone(tag, err)
		}()
		return
	}
	lba, _, err := l.checkRange(off, int64(len(p)))
	if err != nil {
		done.IODone(tag, err)
		return
	}
	x := lunIOs.Get()
	x.l, x.sub, x.p, x.lba, x.write, x.fua, x.done, x.tag = l, sub, p, lba, write, fua, done, tag
	x.next()
}

// next starts the next chunk.
func (x *lunIO) next() {
	bs := int(x.l.info.BlockSize)
	x.n = min(len(x.p), int(x.l.MaxTransfer())/bs*bs)
	blocks := uint32(x.n / bs)
	x.cmd = Command{LUN: x.l.lun}
	if x.write {
		x.cdb = scsi.Write(x.lba, blocks, x.fua)
		x.cmd.Write = x.p[:x.n]
	} else {
		x.cdb = scsi.Read(x.lba, blocks, false)
		x.cmd.Read = x.p[:x.n]
	}
	x.attempt, x.last = 0, nil
	x.issue()
}

// issue submits the chunk's command (again).
func (x *lunIO) issue() {
	x.cmd.CDB = x.cdbBuf[:copy(x.cdbBuf[:], x.cdb.Bytes())]
	if err := x.sub.Submit(&x.cmd, x, 0); err != nil {
		x.finish(ioErr(fmt.Errorf("%s: %w", x.cdb.Opcode(), err)))
	}
}

// CommandDone implements CommandDone: the chunk's command ended.
func (x *lunIO) CommandDone(_ Tag, r *Result, err error) {
	v := x.l.judge(x.cdb, r, err, false)
	switch v.next {
	case attemptDone:
		if got := r.Transferred(x.n); got != x.n {
			x.finish(ioErr(fmt.Errorf("%s: short transfer: %d of %d bytes (residual %d)", x.cdb.Opcode(), got, x.n, r.Residual)))
			return
		}
		x.p = x.p[x.n:]
		x.lba += uint64(x.n / int(x.l.info.BlockSize))
		if len(x.p) == 0 {
			x.finish(nil)
			return
		}
		x.next()
		return
	case attemptFailed:
		x.finish(ioErr(v.err))
		return
	}
	x.last = v.err
	x.attempt++
	if x.attempt > x.l.retries {
		x.finish(ioErr(x.last))
		return
	}
	if v.next == attemptAgain {
		x.issue()
		return
	}
	time.AfterFunc(time.Duration(x.attempt)*20*time.Millisecond, x.issue) // as backoff
}

// finish reports the request's end and returns x to the pool.
func (x *lunIO) finish(err error) {
	done, tag := x.done, x.tag
	*x = lunIO{}
	lunIOs.Put(x)
	done.IODone(tag, err)
}
