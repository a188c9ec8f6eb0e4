package pdu

import (
	"bytes"
	"testing"
)

func TestDigestKnownValue(t *testing.T) {
	// RFC 7143 Appendix B.4: 32 bytes of zeros give CRC32C 0x8a9136aa,
	// sent as aa 36 91 8a.
	c := CRC32C(make([]byte, 32))
	var b [4]byte
	PutDigest(b[:], c)
	if !bytes.Equal(b[:], []byte{0xaa, 0x36, 0x91, 0x8a}) {
		t.Fatalf("digest bytes %x", b)
	}
}
