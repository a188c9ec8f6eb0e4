package initiator

import "github.com/iser-attach/iser-attach/blockdev"

// This file holds batches (blockdev.Batcher): a frontend's loop starts
// several commands in one pass and the datamover posts them with one
// doorbell when the pass ends.

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
