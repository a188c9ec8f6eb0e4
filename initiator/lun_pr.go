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
