package initiator

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// This file holds the Multipath's I/O: the choice of a path in the
// submitting goroutine (no hand-off, nothing allocated), and the reissue
// of a command whose path failed on another one.

// transitionPause is how long a command that met an ALUA transition waits
// before it is issued again, when no other path serves it.
const transitionPause = 100 * time.Millisecond

// noPathPoll bounds a wait for a usable path between two looks.
const noPathPoll = 50 * time.Millisecond

// Path classes for pick: I/O goes to the best class that has a path.
const (
	classOptimized = iota
	classNonOptimized
	classUnusable
)

// class says whether the path carries I/O now, and how well.
func (p *mpath) class() int {
	if p.refused.Load() {
		return classUnusable
	}
	s := p.session()
	if s == nil || (p.m.bound.Load() && p.checked.Load() != s) {
		return classUnusable
	}
	switch a := p.access.Load(); a {
	case accessUnknown, 0: // active/optimized
		return classOptimized
	case 1: // active/non-optimized
		return classNonOptimized
	}
	return classUnusable
}

// pick chooses the path for the next command among the usable paths of
// the best class (active/optimized; active/non-optimized only when no
// optimized path is usable), nil when no path is usable. Round-robin takes
// them in turn; queue-length takes the one with the fewest commands in
// flight and, among equals, the one picked least recently. It allocates
// nothing.
func (m *Multipath) pick() *mpath {
	n := uint64(len(m.paths))
	turn := m.rr.Add(1)
	if m.cfg.Selector == SelectQueueLength {
		var best *mpath
		bestClass, bestQ, bestTurn := classUnusable, int64(0), uint64(0)
		for _, p := range m.paths {
			c := p.class()
			if c == classUnusable || c > bestClass {
				continue
			}
			q, t := p.inflight.Load(), p.picked.Load()
			if best == nil || c < bestClass || q < bestQ || q == bestQ && t < bestTurn {
				best, bestClass, bestQ, bestTurn = p, c, q, t
			}
		}
		if best != nil {
			best.picked.Store(turn)
		}
		return best
	}
	var non *mpath
	for i := range n {
		p := m.paths[(turn+i)%n]
		switch p.class() {
		case classOptimized:
			return p
		case classNonOptimized:
			if non == nil {
				non = p
			}
		}
	}
	return non
}

// isClosed reports whether Close was called.
func (m *Multipath) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// waitPath returns a usable path, waiting while there is none: from
// *since (set now when zero) up to the no-path timeout, then an EIO error.
func (m *Multipath) waitPath(ctx context.Context, since *time.Time) (*mpath, error) {
	for {
		ch := m.changes()
		if p := m.pick(); p != nil {
			m.noPathSince.Store(0)
			return p, nil
		}
		m.noPathSince.CompareAndSwap(0, time.Now().UnixNano())
		if m.isClosed() {
			return nil, ErrSessionClosed
		}
		if since.IsZero() {
			*since = time.Now()
		}
		left := m.cfg.NoPathTimeout - time.Since(*since)
		if left <= 0 {
			return nil, &ioError{fmt.Errorf("%w for %v (no-path timeout)", ErrNoPath, m.cfg.NoPathTimeout), syscall.EIO}
		}
		t := time.NewTimer(min(left, noPathPoll))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// pathError says whether err, a command's error from a path's Nexus, is
// the path failing (the command may run on another path) rather than the
// target failing the command.
func (m *Multipath) pathError(err error) bool {
	return err != nil && !isTargetFailure(err) && !m.isClosed()
}

// pathFailed records that p failed a command with err; the first failure
// after the path was up is logged.
func (p *mpath) pathFailed(err error) {
	if nx := p.nx.Load(); nx != nil && errors.Is(err, ErrReplacementTimeout) {
		// The path's Nexus fails I/O at once (replacement timeout 0):
		// its session's end says more.
		if le := nx.Status().LastError; le != nil {
			err = le
		}
	}
	p.mu.Lock()
	p.lastErr = err.Error()
	first := !p.wasDown
	p.wasDown = true
	p.mu.Unlock()
	if first {
		p.log.Warn().Err(err).Msg("path down: its I/O moves to the other paths")
	}
}

// Do runs a SCSI command on a usable path like Nexus.Do. A command whose
// path fails, or that an ALUA state of its path refused, is issued again
// on another path; a data-changing one only after the fence (see
// multipath_fence.go). While no path is usable it waits, up to the no-path
// timeout.
func (m *Multipath) Do(ctx context.Context, c *Command) (*Result, error) {
	var since, aluaSince time.Time
	for attempt := 0; ; {
		p, err := m.waitPath(ctx, &since)
		if err != nil {
			return nil, fmt.Errorf("scsi command 0x%02x: %w", c.CDB[0], err)
		}
		since = time.Time{}
		nx := p.nx.Load()
		p.ios.Add(1)
		p.inflight.Add(1)
		r, err := nx.Do(ctx, c)
		p.inflight.Add(-1)
		if err == nil {
			if wait, again := m.aluaRetry(p, r, &aluaSince); again {
				if wait {
					if err := sleepCtx(ctx, transitionPause); err != nil {
						return nil, err
					}
				}
				continue
			}
			return r, nil
		}
		if ctx.Err() != nil || !m.pathError(err) {
			return nil, err
		}
		if attempt++; attempt > maxReissue {
			return nil, err
		}
		p.pathFailed(err)
		p.failovers.Add(1)
		if changesData(c.CDB[0]) {
			if ferr := m.fenceWait(ctx, c.LUN); ferr != nil {
				return nil, fmt.Errorf("scsi command 0x%02x: %w (after %w)", c.CDB[0], ferr, err)
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mpCmd is a command started with Multipath.Submit, from its submission
// to its CommandDone; it is pooled.
type mpCmd struct {
	m         *Multipath
	c         Command // CDB in cdb
	cdb       [16]byte
	done      CommandDone
	tag       Tag
	p         *mpath // the path it was last submitted on
	attempt   int
	since     time.Time // when it first found no usable path
	aluaSince time.Time // when an ALUA state first refused it
}

// Submit starts a SCSI command on a usable path and returns at once;
// done.CommandDone reports its end exactly once, with what Do would
// return. The path is chosen on the caller's goroutine; only a command
// that finds no usable path waits on a goroutine of its own. Submit
// returns an error, and done is not called, only for an invalid command.
func (m *Multipath) Submit(c *Command, done CommandDone, tag Tag) error {
	if err := checkCommand(c); err != nil {
		return err
	}
	if done == nil {
		return fmt.Errorf("scsi command 0x%02x: Submit without a CommandDone", c.CDB[0])
	}
	x := m.cmds.Get()
	x.m = m
	x.c = *c
	x.c.CDB = x.cdb[:copy(x.cdb[:], c.CDB)]
	x.done, x.tag, x.attempt = done, tag, 0
	x.since, x.aluaSince = time.Time{}, time.Time{}
	x.issue()
	return nil
}

// issue submits x on a usable path, or waits for one on a goroutine.
func (x *mpCmd) issue() {
	if p := x.m.pick(); p != nil {
		x.send(p)
		return
	}
	go x.await()
}

// await waits for a usable path and submits x on it.
func (x *mpCmd) await() {
	p, err := x.m.waitPath(context.Background(), &x.since)
	if err != nil {
		x.finish(nil, fmt.Errorf("scsi command 0x%02x: %w", x.c.CDB[0], err))
		return
	}
	x.send(p)
}

// send submits x on p.
func (x *mpCmd) send(p *mpath) {
	x.p = p
	x.since = time.Time{}
	p.ios.Add(1)
	p.inflight.Add(1)
	if err := p.nx.Load().Submit(&x.c, x, 0); err != nil {
		p.inflight.Add(-1)
		x.finish(nil, err)
	}
}

// CommandDone implements CommandDone for the path x was submitted on.
func (x *mpCmd) CommandDone(_ Tag, r *Result, err error) {
	p, m := x.p, x.m
	p.inflight.Add(-1)
	if err == nil {
		if wait, again := m.aluaRetry(p, r, &x.aluaSince); again {
			if wait {
				time.AfterFunc(transitionPause, x.issue)
			} else {
				x.issue()
			}
			return
		}
		x.finish(r, nil)
		return
	}
	if !m.pathError(err) {
		x.finish(nil, err)
		return
	}
	if x.attempt++; x.attempt > maxReissue {
		x.finish(nil, err)
		return
	}
	p.pathFailed(err)
	p.failovers.Add(1)
	m.log.Debug().Err(err).Str("portal", p.portal).Uint8("op", x.c.CDB[0]).Msg("command moves to another path")
	if changesData(x.c.CDB[0]) {
		m.fenceThen(x)
		return
	}
	x.issue()
}

// finish reports x's end and returns x to the pool.
func (x *mpCmd) finish(r *Result, err error) {
	done, tag := x.done, x.tag
	x.done, x.p, x.c = nil, nil, Command{}
	x.m.cmds.Put(x)
	done.CommandDone(tag, r, err)
}

// changesData says whether a command with this opcode may change the
// medium, so that a copy left on a failed path must be fenced before it
// is issued again elsewhere. Unknown opcodes count as changing.
func changesData(op byte) bool {
	switch op {
	case 0x00, 0x03, 0x08, 0x12, 0x1a, 0x25, 0x28, 0x2f, 0x35, 0x4d, 0x5a,
		0x88, 0x8f, 0x91, 0x9e, 0xa0, 0xa3, 0xa8, 0xaf:
		// TEST UNIT READY, REQUEST SENSE, READ(6), INQUIRY, MODE SENSE(6),
		// READ CAPACITY(10), READ(10), VERIFY(10), SYNCHRONIZE CACHE(10),
		// LOG SENSE, MODE SENSE(10), READ(16), VERIFY(16), SYNCHRONIZE
		// CACHE(16), SERVICE ACTION IN(16), REPORT LUNS, MAINTENANCE IN,
		// READ(12), VERIFY(12).
		return false
	}
	return true
}
