package initiator

import "github.com/iser-attach/iser-attach/blockdev"

// This file holds the Multipath's batches (blockdev.Batcher): a
// frontend's pass plugs the current session of every path, so that the
// SENDs its commands queue on any path are posted with one doorbell per
// path when the pass ends, as on a single Nexus.

// mpBatch is one open batch of a Multipath: what each path's Nexus
// returned from BeginBatch, by path index. Pooled.
type mpBatch struct {
	held []blockdev.Batch
}

// BeginBatch implements blockdev.Batcher over every path that has a
// Nexus; a path that gets its first Nexus meanwhile is not held back.
// It allocates nothing once warm.
func (m *Multipath) BeginBatch() blockdev.Batch {
	b := m.batches.Get()
	if len(b.held) != len(m.paths) {
		b.held = make([]blockdev.Batch, len(m.paths))
	}
	for i, p := range m.paths {
		if nx := p.nx.Load(); nx != nil {
			b.held[i] = nx.BeginBatch()
		}
	}
	return blockdev.Batch{Held: b}
}

// EndBatch implements blockdev.Batcher: it ends each path's batch on the
// session it was opened on, even if the path has moved to another since.
func (m *Multipath) EndBatch(bb blockdev.Batch) {
	b, ok := bb.Held.(*mpBatch)
	if !ok {
		return
	}
	for i := range b.held {
		if s, ok := b.held[i].Held.(*Session); ok {
			s.EndBatch(b.held[i])
		}
		b.held[i] = blockdev.Batch{}
	}
	m.batches.Put(b)
}
