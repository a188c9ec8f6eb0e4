package initiator

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// CHAP (RFC 1994 as used by RFC 7143 section 12.1.3). The algorithm numbers
// are IANA's PPP authentication algorithms, as open-iscsi's chap_algs.

// CHAPAlgorithm is a CHAP_A value.
type CHAPAlgorithm int

const (
	CHAPMD5     CHAPAlgorithm = 5
	CHAPSHA1    CHAPAlgorithm = 6
	CHAPSHA256  CHAPAlgorithm = 7
	CHAPSHA3256 CHAPAlgorithm = 8
)

// DefaultCHAPAlgorithms is the CHAP_A list offered, strongest first; MD5 is
// always last and always present (RFC 7143 requires it).
var DefaultCHAPAlgorithms = []CHAPAlgorithm{CHAPSHA3256, CHAPSHA256, CHAPSHA1, CHAPMD5}

func (a CHAPAlgorithm) String() string {
	switch a {
	case CHAPMD5:
		return "MD5"
	case CHAPSHA1:
		return "SHA-1"
	case CHAPSHA256:
		return "SHA-256"
	case CHAPSHA3256:
		return "SHA3-256"
	}
	return fmt.Sprintf("CHAP algorithm %d", int(a))
}

func (a CHAPAlgorithm) newHash() (hash.Hash, error) {
	switch a {
	case CHAPMD5:
		return md5.New(), nil
	case CHAPSHA1:
		return sha1.New(), nil
	case CHAPSHA256:
		return sha256.New(), nil
	case CHAPSHA3256:
		return sha3.New256(), nil
	}
	return nil, fmt.Errorf("chap: unsupported algorithm %d", int(a))
}

// CHAPResponse computes H(id || secret || challenge).
func CHAPResponse(a CHAPAlgorithm, id byte, secret, challenge []byte) ([]byte, error) {
	h, err := a.newHash()
	if err != nil {
		return nil, err
	}
	h.Write([]byte{id})
	h.Write(secret)
	h.Write(challenge)
	return h.Sum(nil), nil
}

// ParseCHAPBinary decodes a CHAP binary value: 0x/0X hexadecimal or 0b/0B
// base64 (RFC 7143 section 6.1).
func ParseCHAPBinary(s string) ([]byte, error) {
	if len(s) < 3 {
		return nil, fmt.Errorf("chap: binary value %q too short", s)
	}
	switch s[:2] {
	case "0x", "0X":
		h := s[2:]
		if len(h)%2 == 1 {
			h = "0" + h
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("chap: bad hex value: %w", err)
		}
		return b, nil
	case "0b", "0B":
		b, err := base64.StdEncoding.DecodeString(s[2:])
		if err != nil {
			return nil, fmt.Errorf("chap: bad base64 value: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("chap: binary value %q lacks a 0x or 0b prefix", s)
}

// FormatCHAPBinary encodes b as 0x-prefixed hexadecimal.
func FormatCHAPBinary(b []byte) string { return "0x" + hex.EncodeToString(b) }

// CHAPCredentials are the secrets for one-way and, optionally, mutual CHAP.
type CHAPCredentials struct {
	User   string
	Secret []byte
	// MutualUser and MutualSecret authenticate the target (mutual CHAP)
	// when MutualSecret is set.
	MutualUser   string
	MutualSecret []byte
	// Algorithms restricts CHAP_A; nil means DefaultCHAPAlgorithms.
	Algorithms []CHAPAlgorithm
}

func (c *CHAPCredentials) algorithms() []CHAPAlgorithm {
	if len(c.Algorithms) > 0 {
		return c.Algorithms
	}
	return DefaultCHAPAlgorithms
}

func (c *CHAPCredentials) offerA() string {
	var parts []string
	for _, a := range c.algorithms() {
		parts = append(parts, strconv.Itoa(int(a)))
	}
	return strings.Join(parts, ",")
}

// chapExchange holds the state of one CHAP authentication during login.
type chapExchange struct {
	creds     *CHAPCredentials
	alg       CHAPAlgorithm
	mutualID  byte
	mutualChl []byte
}

// answer computes CHAP_N/CHAP_R for the target's CHAP_A/I/C and, for mutual
// CHAP, CHAP_I/CHAP_C of our own challenge.
func (x *chapExchange) answer(aStr, iStr, cStr string) ([][2]string, error) {
	a, err := strconv.Atoi(aStr)
	if err != nil {
		return nil, fmt.Errorf("chap: target chose algorithm %q", aStr)
	}
	alg := CHAPAlgorithm(a)
	ok := false
	for _, o := range x.creds.algorithms() {
		ok = ok || o == alg
	}
	if !ok {
		return nil, fmt.Errorf("chap: target chose %s, which was not offered", alg)
	}
	id, err := strconv.ParseUint(iStr, 0, 8)
	if err != nil {
		return nil, fmt.Errorf("chap: bad CHAP_I %q", iStr)
	}
	chl, err := ParseCHAPBinary(cStr)
	if err != nil {
		return nil, err
	}
	if len(chl) == 0 || len(chl) > 1024 {
		return nil, fmt.Errorf("chap: target challenge of %d bytes", len(chl))
	}
	resp, err := CHAPResponse(alg, byte(id), x.creds.Secret, chl)
	if err != nil {
		return nil, err
	}
	x.alg = alg
	out := [][2]string{{"CHAP_N", x.creds.User}, {"CHAP_R", FormatCHAPBinary(resp)}}
	if len(x.creds.MutualSecret) > 0 {
		h, _ := alg.newHash()
		x.mutualChl = make([]byte, max(16, h.Size()))
		var idb [1]byte
		if _, err := rand.Read(idb[:]); err != nil {
			return nil, fmt.Errorf("chap: random: %w", err)
		}
		if _, err := rand.Read(x.mutualChl); err != nil {
			return nil, fmt.Errorf("chap: random: %w", err)
		}
		if subtle.ConstantTimeCompare(x.mutualChl, chl) == 1 {
			return nil, fmt.Errorf("chap: target challenge reflected")
		}
		x.mutualID = idb[0]
		out = append(out, [2]string{"CHAP_I", strconv.Itoa(int(x.mutualID))},
			[2]string{"CHAP_C", FormatCHAPBinary(x.mutualChl)})
	}
	return out, nil
}

// verifyTarget checks the target's CHAP_N/CHAP_R for mutual CHAP.
func (x *chapExchange) verifyTarget(n, r string) error {
	if n != x.creds.MutualUser {
		return fmt.Errorf("chap: target answered as %q, expected %q", n, x.creds.MutualUser)
	}
	got, err := ParseCHAPBinary(r)
	if err != nil {
		return err
	}
	want, err := CHAPResponse(x.alg, x.mutualID, x.creds.MutualSecret, x.mutualChl)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return fmt.Errorf("chap: target failed mutual authentication (wrong response)")
	}
	return nil
}
