package pdu

import (
	"encoding/binary"
	"hash/crc32"
)

// CRC32C header and data digests (RFC 7143 section 13.1, Appendix B.4).
// The digest goes on the wire in little-endian byte order, as Linux and tgt
// put it there.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C computes the digest over the concatenation of parts.
func CRC32C(parts ...[]byte) uint32 {
	var c uint32
	for _, p := range parts {
		c = crc32.Update(c, castagnoli, p)
	}
	return c
}

// PutDigest writes digest c into the first 4 bytes of b in wire order.
func PutDigest(b []byte, c uint32) { binary.LittleEndian.PutUint32(b, c) }

// ParseDigest reads a digest in wire order from the first 4 bytes of b.
func ParseDigest(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
