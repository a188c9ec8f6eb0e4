package initiator

import (
	"context"
	"crypto/rand"
	"fmt"
)

// Transports accepted by DialDatamover.
const (
	TransportTCP  = "tcp"
	TransportISER = "iser"
	TransportAuto = "auto"
)

// DialDatamover opens a connection to a portal (host:port) with the named
// transport.
func DialDatamover(ctx context.Context, transport, addr string) (Datamover, error) {
	switch transport {
	case "", TransportTCP:
		return DialTCP(ctx, addr)
	case TransportISER, TransportAuto:
		return dialISER(ctx, transport, addr)
	}
	return nil, fmt.Errorf("dial %s: unknown transport %q (want tcp, iser or auto)", addr, transport)
}

// NewISID returns a random-format ISID (RFC 7143 section 11.12.5: T=10b).
func NewISID() ISID {
	var id ISID
	_, _ = rand.Read(id[:])
	id[0] = 0x80 | id[0]&0x3f
	return id
}
