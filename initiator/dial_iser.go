package initiator

import (
	"context"
	"errors"
	"fmt"
)

// ErrISERUnavailable is returned when an iSER connection cannot be made
// with this build or on this host.
var ErrISERUnavailable = errors.New("iSER transport unavailable")

// dialISER connects over iSER; with "auto" it falls back to iSCSI/TCP.
func dialISER(ctx context.Context, transport, addr string) (Datamover, error) {
	if transport == TransportAuto {
		return DialTCP(ctx, addr)
	}
	return nil, fmt.Errorf("dial iser %s: %w: the iSER datamover is not built yet", addr, ErrISERUnavailable)
}
