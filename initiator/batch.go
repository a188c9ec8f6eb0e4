package initiator

import "github.com/iser-attach/iser-attach/blockdev"

// What each Executor offers a LUN (and through it a frontend).
var (
	_ Executor                = (*Session)(nil)
	_ Submitter               = (*Session)(nil)
	_ blockdev.Batcher        = (*Session)(nil)
	_ blockdev.Reaping        = (*Session)(nil)
	_ Executor                = (*Nexus)(nil)
	_ Submitter               = (*Nexus)(nil)
	_ blockdev.Batcher        = (*Nexus)(nil)
	_ blockdev.Reaping        = (*Nexus)(nil)
	_ blockdev.BufferProvider = (*Nexus)(nil)
	_ Executor                = (*Multipath)(nil)
	_ Submitter               = (*Multipath)(nil)
	_ blockdev.Batcher        = (*Multipath)(nil)
	_ blockdev.Reaping        = (*Multipath)(nil)
	_ blockdev.Reaper         = (*mpReaper)(nil)
	_ blockdev.Reaper         = (*iserReaper)(nil)
)

// This file holds what a frontend's loop does with a whole session:
// batches (blockdev.Batcher: several commands started in one pass, posted
// with one doorbell when the pass ends) and reaping (blockdev.Reaping:
// the loop takes the completion queue over).

// BeginBatch implements blockdev.Batcher: the SENDs of the commands
// started until EndBatch are posted together then (iSER), or as usual
// (a datamover that does not batch).
func (s *Session) BeginBatch() blockdev.Batch {
	if s.plugger == nil {
		return blockdev.Batch{}
	}
	s.plugger.Plug()
	return blockdev.Batch{Held: s}
}

// EndBatch implements blockdev.Batcher.
func (s *Session) EndBatch(b blockdev.Batch) {
	if held, ok := b.Held.(*Session); ok {
		held.plugger.Unplug()
	}
}

// BeginBatch implements blockdev.Batcher on the current session; EndBatch
// ends it on that session even if the Nexus has moved to another.
func (n *Nexus) BeginBatch() blockdev.Batch {
	if s := n.up.Load(); s != nil {
		return s.BeginBatch()
	}
	return blockdev.Batch{}
}

// EndBatch implements blockdev.Batcher.
func (n *Nexus) EndBatch(b blockdev.Batch) {
	if held, ok := b.Held.(*Session); ok {
		held.EndBatch(b)
	}
}

// BeginBatch implements blockdev.Batcher over the LUN's Executor.
func (l *LUN) BeginBatch() blockdev.Batch {
	if l.batcher == nil {
		return blockdev.Batch{}
	}
	return l.batcher.BeginBatch()
}

// EndBatch implements blockdev.Batcher.
func (l *LUN) EndBatch(b blockdev.Batch) {
	if l.batcher != nil {
		l.batcher.EndBatch(b)
	}
}

// reapSource is a datamover whose completion queue a frontend's loop can
// take over (blockdev.Reaping; the iSER datamover).
type reapSource interface {
	TakeReaper(revoked func()) (blockdev.Reaper, bool)
}

// Reaper implements blockdev.Reaping: the datamover's completion queue,
// when it can be handed over and the session is up.
func (s *Session) Reaper(revoked func()) (blockdev.Reaper, bool) {
	if s.reaps == nil {
		return nil, false
	}
	s.mu.Lock()
	failed := s.err != nil
	s.mu.Unlock()
	if failed {
		return nil, false
	}
	return s.reaps.TakeReaper(revoked)
}

// canReap reports whether the current session's datamover can hand its
// completion queue over at all (iSER; not whether it is free now).
func (n *Nexus) canReap() bool {
	s := n.up.Load()
	return s != nil && s.reaps != nil
}

// Reaper implements blockdev.Reaping on the current session. A loop holds
// that session's queue until it ends; then it asks again and gets the
// next session's.
func (n *Nexus) Reaper(revoked func()) (blockdev.Reaper, bool) {
	if s := n.up.Load(); s != nil {
		return s.Reaper(revoked)
	}
	return nil, false
}

// Reaper implements blockdev.Reaping over the LUN's Executor.
func (l *LUN) Reaper(revoked func()) (blockdev.Reaper, bool) {
	if l.reaping == nil {
		return nil, false
	}
	return l.reaping.Reaper(revoked)
}
