package initiator

import (
	"context"
	"errors"
	"fmt"

	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// This file holds a Multipath's persistent reservation key. Every path is
// its own I_T nexus (its own ISID), and a registration belongs to one I_T
// nexus: the key is registered through each path, and again on each new
// session of a path before it carries I/O (a path that was down when the
// volume was fenced, or whose session the target forgot).

// keyRegistrar is an Executor with several I_T nexuses to one logical
// unit; LUN.Fence registers a key through it instead of one command.
type keyRegistrar interface {
	registerKey(ctx context.Context, key uint64) error
}

var _ keyRegistrar = (*Multipath)(nil)

// registerKey registers key (REGISTER AND IGNORE EXISTING KEY) through
// every path with a session now, and makes every later check of a path
// register it first. Key 0 unregisters every path with a session and
// stops that. It fails when no path registered (or, for 0, when a path
// with a session could not unregister).
func (m *Multipath) registerKey(ctx context.Context, key uint64) error {
	m.prKey.Store(key)
	var errs []error
	ok := 0
	for _, p := range m.paths {
		if p.refused.Load() || p.session() == nil {
			continue
		}
		if err := p.registerKey(ctx, key); err != nil {
			errs = append(errs, err)
			continue
		}
		ok++
	}
	if key == 0 && len(errs) > 0 {
		return errors.Join(errs...)
	}
	if key != 0 && ok == 0 {
		return fmt.Errorf("multipath: register the reservation key on no path: %w", errors.Join(errs...))
	}
	for _, err := range errs {
		m.log.Warn().Err(err).Msg("reservation key: a path will register on its next session")
	}
	return nil
}

// registerKey registers key on p's current session (0: unregisters).
func (p *mpath) registerKey(ctx context.Context, key uint64) error {
	prm := scsi.PROutParameters{ActionKey: key}
	if _, err := p.pathDo(ctx, scsi.PersistentReserveOut(scsi.PROutRegisterAndIgnoreExisting, 0), nil, prm.Marshal()); err != nil {
		return fmt.Errorf("path %s: register the reservation key: %w", p.portal, prErr(err))
	}
	return nil
}
