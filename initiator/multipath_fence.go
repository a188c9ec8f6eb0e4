package initiator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// This file holds the fence that keeps a stale write from landing after a
// newer one. A data-changing command that was in flight on a path that
// failed may still be in the target's task set for that path's I_T nexus:
// the target does not know yet that the connection is gone. Issued again
// on another path at once, it could complete there, let a newer write to
// the same blocks follow, and then the old copy could still run. So
// before such a command is issued again elsewhere, a LOGICAL UNIT RESET is
// sent through a usable path and answered: it ends the task set of every
// I_T nexus of the logical unit (SAM-5 6.3.3), the failed path's too.
// Commands that only read are issued again at once. The commands the reset
// aborts on the path it went through end with ErrTaskAborted and their
// Nexus issues them again; see docs/architecture.md for the limits.

// fenceState orders the resets: a command waits for a reset that started
// after its path failed (need), so that one reset serves every command a
// path failure ended at once.
type fenceState struct {
	mu      sync.Mutex
	started uint64 // resets started
	running bool
	waiters []fenceWaiter
}

type fenceWaiter struct {
	need uint64 // the reset this waiter needs (started+1 when it came)
	lun  [8]byte
	x    *mpCmd     // a Submit to issue again, or
	ch   chan error // a Do waiting
}

func (w *fenceWaiter) release(err error) {
	if w.ch != nil {
		w.ch <- err
		return
	}
	if err != nil {
		w.x.finish(nil, fmt.Errorf("scsi command 0x%02x: %w", w.x.c.CDB[0], err))
		return
	}
	w.x.issue()
}

// fenceThen issues x again once a reset fenced its failed path.
func (m *Multipath) fenceThen(x *mpCmd) { m.addFence(fenceWaiter{lun: x.c.LUN, x: x}) }

// fenceWait returns once a reset fenced a failed path for a Do.
func (m *Multipath) fenceWait(ctx context.Context, lun [8]byte) error {
	ch := make(chan error, 1)
	m.addFence(fenceWaiter{lun: lun, ch: ch})
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Multipath) addFence(w fenceWaiter) {
	f := &m.fence
	f.mu.Lock()
	w.need = f.started + 1
	f.waiters = append(f.waiters, w)
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if start {
		go m.fenceLoop()
	}
}

// fenceLoop resets the logical unit until no command waits for a reset.
func (m *Multipath) fenceLoop() {
	f := &m.fence
	for {
		f.mu.Lock()
		if len(f.waiters) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		lun := f.waiters[0].lun
		f.started++
		gen := f.started
		n := len(f.waiters)
		f.mu.Unlock()
		err := m.resetLUN(lun, n)
		f.mu.Lock()
		var ready, keep []fenceWaiter
		for _, w := range f.waiters {
			if w.lun == lun && (w.need <= gen || err != nil) {
				ready = append(ready, w)
			} else {
				keep = append(keep, w)
			}
		}
		f.waiters = keep
		f.mu.Unlock()
		for i := range ready {
			ready[i].release(err)
		}
	}
}

// resetLUN sends LOGICAL UNIT RESET through a usable path, trying the
// paths in turn, until one answers or no path is left for the no-path
// timeout.
func (m *Multipath) resetLUN(lun [8]byte, waiting int) error {
	var since time.Time
	for {
		p, err := m.waitPath(m.base, &since)
		if err != nil {
			return fmt.Errorf("LOGICAL UNIT RESET before reissuing writes of a failed path: %w", err)
		}
		s := p.session()
		if s == nil {
			continue
		}
		start := time.Now()
		if err := s.resetLUN(lun); err != nil {
			p.log.Warn().Err(err).Msg("LOGICAL UNIT RESET failed: trying again")
			if sleepCtx(m.base, transitionPause) != nil {
				return fmt.Errorf("LOGICAL UNIT RESET: %w", ErrSessionClosed)
			}
			continue
		}
		m.resets.Add(1)
		p.log.Warn().Int("commands", waiting).Dur("took", time.Since(start).Round(time.Millisecond)).
			Msg("LOGICAL UNIT RESET answered: writes of the failed path are fenced and issued again")
		return nil
	}
}

// resetLUN sends LOGICAL UNIT RESET and, once it is answered, ends the
// session's own tasks on the LU that the reset aborted (with
// ErrTaskAborted, which a Nexus issues again).
func (s *Session) resetLUN(lun [8]byte) error {
	tmo := tmfTimeout
	if s.cfg.CommandTimeout > 0 {
		tmo = min(tmo, s.cfg.CommandTimeout)
	}
	sn, err := s.tmf(tmo, pdu.TMFLogicalUnitReset, lun, pdu.ReservedTag, 0)
	if err != nil {
		return err
	}
	s.endLUNTasks(lun, sn, fmt.Errorf("LOGICAL UNIT RESET: %w", ErrTaskAborted))
	return nil
}
