package initiator

import (
	"crypto/rand"
	"crypto/sha256"

	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// Transports accepted by DialDatamover.
const (
	TransportTCP  = "tcp"
	TransportISER = "iser"
	TransportAuto = "auto"
)

// ISIDFromName derives a random-format ISID from a stable name (the volume):
// every process that attaches the same volume uses the same ISID, so its
// first login reinstates the session a killed predecessor left at the
// target, whose tasks the target then ends (RFC 7143 section 6.3.5).
func ISIDFromName(name string) pdu.ISID {
	sum := sha256.Sum256([]byte("iser-attach isid\x00" + name))
	var id pdu.ISID
	copy(id[:], sum[:])
	id[0] = 0x80 | id[0]&0x3f
	return id
}

// NewISID returns a random-format ISID (RFC 7143 section 11.12.5: T=10b).
func NewISID() pdu.ISID {
	var id pdu.ISID
	_, _ = rand.Read(id[:])
	id[0] = 0x80 | id[0]&0x3f
	return id
}
