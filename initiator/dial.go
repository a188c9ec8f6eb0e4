package initiator

import (
	"crypto/rand"
)

// Transports accepted by DialDatamover.
const (
	TransportTCP  = "tcp"
	TransportISER = "iser"
	TransportAuto = "auto"
)

// NewISID returns a random-format ISID (RFC 7143 section 11.12.5: T=10b).
func NewISID() ISID {
	var id ISID
	_, _ = rand.Read(id[:])
	id[0] = 0x80 | id[0]&0x3f
	return id
}
