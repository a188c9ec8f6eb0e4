package initiator

import (
	"context"
	"errors"
	"fmt"

	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// This file holds persistent reservations (SPC-4 5.13) on a LUN: what a
// node needs to fence a volume. A registration belongs to the I_T nexus
// the command went through (this session's initiator port and the target
// port); a multipath volume registers through each of its paths.

// prInAlloc is the allocation length of a PERSISTENT RESERVE IN: room for
// hundreds of keys or dozens of full-status descriptors.
const prInAlloc = 8192

// ErrReservationConflict is the RESERVATION CONFLICT status: another I_T
// nexus holds a persistent reservation that excludes this command.
var ErrReservationConflict = errors.New("reservation conflict")

// prIn runs one PERSISTENT RESERVE IN and returns the reply's bytes.
func (l *LUN) prIn(ctx context.Context, action scsi.PRInAction) ([]byte, error) {
	buf := make([]byte, prInAlloc)
	cdb := scsi.PersistentReserveIn(action, prInAlloc)
	r, err := l.exec(ctx, cdb, buf, nil)
	if err != nil {
		return nil, prErr(err)
	}
	return buf[:r.Transferred(len(buf))], nil
}

// PROut runs one PERSISTENT RESERVE OUT: action with reservation type typ
// and parameters p. A RESERVATION CONFLICT (the key given is not this
// nexus's registration, or another holds the reservation) is returned as
// an error that wraps ErrReservationConflict.
func (l *LUN) PROut(ctx context.Context, action scsi.PROutAction, typ scsi.PRType, p scsi.PROutParameters) error {
	cdb := scsi.PersistentReserveOut(action, typ)
	if _, err := l.exec(ctx, cdb, nil, p.Marshal()); err != nil {
		return fmt.Errorf("%s: %w", action, prErr(err))
	}
	return nil
}

// prErr adds ErrReservationConflict to an error carrying that status.
func prErr(err error) error {
	var se *scsi.StatusError
	if errors.As(err, &se) && se.Status == scsi.StatusReservationConflict {
		return fmt.Errorf("%w: %w", ErrReservationConflict, err)
	}
	return err
}

// ReadKeys returns the keys registered on the logical unit (READ KEYS).
func (l *LUN) ReadKeys(ctx context.Context) (scsi.PRKeys, error) {
	b, err := l.prIn(ctx, scsi.PRInReadKeys)
	if err != nil {
		return scsi.PRKeys{}, err
	}
	return scsi.ParsePRKeys(b)
}

// ReadReservation returns the logical unit's persistent reservation, if
// any (READ RESERVATION).
func (l *LUN) ReadReservation(ctx context.Context) (scsi.PRReservation, error) {
	b, err := l.prIn(ctx, scsi.PRInReadReservation)
	if err != nil {
		return scsi.PRReservation{}, err
	}
	return scsi.ParsePRReservation(b)
}

// ReadFullStatus returns every registration with its initiator port
// (READ FULL STATUS). Targets without it (tgt) answer ILLEGAL REQUEST,
// returned as the error.
func (l *LUN) ReadFullStatus(ctx context.Context) (scsi.PRStatus, error) {
	b, err := l.prIn(ctx, scsi.PRInReadFullStatus)
	if err != nil {
		return scsi.PRStatus{}, err
	}
	return scsi.ParsePRStatus(b)
}

// FenceType is the reservation Fence holds: Write Exclusive, Registrants
// Only. Every I_T nexus of the holder's volume is registered, so every
// path writes; any other initiator may read but not write.
const FenceType = scsi.PRWriteExclusiveRegistrantsOnly

// ReservedError is a logical unit another key holds the reservation of.
type ReservedError struct {
	Key       uint64 // the holder's key (0 for the all-registrants types)
	Type      scsi.PRType
	Initiator string // the holder's iSCSI name where the target says (READ FULL STATUS), else ""
}

func (e *ReservedError) Error() string {
	s := fmt.Sprintf("reserved by key 0x%016x (%s)", e.Key, e.Type)
	if e.Initiator != "" {
		s += ", initiator " + e.Initiator
	}
	return s
}

// Fenced is what Fence did.
type Fenced struct {
	// Preempted is the key Fence took the reservation from (0: it was free
	// or already this key's).
	Preempted uint64
	// Initiator is the preempted holder's iSCSI name, where the target says.
	Initiator string
}

// Fence makes key the holder of the logical unit's reservation (FenceType),
// registered on every I_T nexus (each path of a Multipath). Holding it
// already is no error (a restarted daemon fences again). When another key
// holds it, Fence registers nothing and returns a *ReservedError, unless
// preempt: then PREEMPT removes the holder's registrations, and its writes
// get RESERVATION CONFLICT from then on.
func (l *LUN) Fence(ctx context.Context, key uint64, preempt bool) (Fenced, error) {
	if key == 0 {
		return Fenced{}, errors.New("fence: reservation key 0 means none")
	}
	r, err := l.ReadReservation(ctx)
	if err != nil {
		return Fenced{}, fmt.Errorf("fence: %w", err)
	}
	if r.Reserved && r.Key != key && !preempt {
		return Fenced{}, l.reservedError(ctx, r)
	}
	if err := l.registerKey(ctx, key); err != nil {
		return Fenced{}, fmt.Errorf("fence: %w", err)
	}
	switch {
	case r.Reserved && r.Key == key:
		return Fenced{}, nil
	case r.Reserved:
		f := Fenced{Preempted: r.Key, Initiator: l.holderName(ctx, r.Key)}
		p := scsi.PROutParameters{Key: key, ActionKey: r.Key}
		if err := l.PROut(ctx, scsi.PROutPreempt, FenceType, p); err != nil {
			return Fenced{}, fmt.Errorf("fence: %w", err)
		}
		return f, nil
	}
	err = l.PROut(ctx, scsi.PROutReserve, FenceType, scsi.PROutParameters{Key: key})
	if errors.Is(err, ErrReservationConflict) {
		// Another initiator reserved it between our look and our RESERVE.
		_ = l.registerKey(ctx, 0)
		if r, rerr := l.ReadReservation(ctx); rerr == nil && r.Reserved {
			return Fenced{}, l.reservedError(ctx, r)
		}
	}
	if err != nil {
		return Fenced{}, fmt.Errorf("fence: %w", err)
	}
	return Fenced{}, nil
}

// Unfence releases the reservation key holds and removes key's
// registration from every I_T nexus (each path of a Multipath); the
// logical unit is then free for another node to fence.
func (l *LUN) Unfence(ctx context.Context, key uint64) error {
	r, err := l.ReadReservation(ctx)
	if err != nil {
		return fmt.Errorf("unfence: %w", err)
	}
	if r.Reserved && r.Key == key {
		// Through a path that is not the holder this is no error and
		// releases nothing; unregistering the holder's nexus releases it.
		if err := l.PROut(ctx, scsi.PROutRelease, r.Type, scsi.PROutParameters{Key: key}); err != nil {
			return fmt.Errorf("unfence: %w", err)
		}
	}
	if err := l.registerKey(ctx, 0); err != nil {
		return fmt.Errorf("unfence: %w", err)
	}
	return nil
}

// registerKey registers key on every I_T nexus of the LUN (0: unregisters).
func (l *LUN) registerKey(ctx context.Context, key uint64) error {
	if kr, ok := l.s.(keyRegistrar); ok {
		return kr.registerKey(ctx, key)
	}
	return l.PROut(ctx, scsi.PROutRegisterAndIgnoreExisting, 0, scsi.PROutParameters{ActionKey: key})
}

// reservedError describes r's holder.
func (l *LUN) reservedError(ctx context.Context, r scsi.PRReservation) error {
	return &ReservedError{Key: r.Key, Type: r.Type, Initiator: l.holderName(ctx, r.Key)}
}

// holderName is the iSCSI name of key's reservation holder, "" where the
// target has no READ FULL STATUS (tgt).
func (l *LUN) holderName(ctx context.Context, key uint64) string {
	st, err := l.ReadFullStatus(ctx)
	if err != nil {
		return ""
	}
	for _, r := range st.Registrants {
		if r.Holder && r.Key == key {
			return r.InitiatorName
		}
	}
	return ""
}
