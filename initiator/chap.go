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
	"errors"
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

// Validate refuses credentials that use one secret for both directions:
// RFC 7143 section 9.2.1 forbids it, as it lets a rogue target reflect our
// own challenge back to us and use our answer as its own.
func (c *CHAPCredentials) Validate() error {
	if len(c.MutualSecret) > 0 && subtle.ConstantTimeCompare(c.Secret, c.MutualSecret) == 1 {
		return errors.New("chap: the mutual CHAP secret is the same as the CHAP secret; RFC 7143 section 9.2.1 requires a different secret for each direction")
	}
	return nil
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
// CHAP, CHAP_I/CHAP_C of our own challenge. It refuses, before computing any
// response, a target challenge that is too short or too long or that is one
// of the challenges this process sent recently (a reflection, RFC 7143
// section 9.2.1).
func (x *chapExchange) answer(aStr, iStr, cStr string) ([][2]string, error) {
	a, ok := parseDecimalConstant(aStr, 255)
	if !ok {
		return nil, fmt.Errorf("chap: target chose algorithm %q", aStr)
	}
	alg := CHAPAlgorithm(a)
	ok = false
	for _, o := range x.creds.algorithms() {
		ok = ok || o == alg
	}
	if !ok {
		return nil, fmt.Errorf("chap: target chose %s, which was not offered", alg)
	}
	id, err := parseCHAPIdentifier(iStr)
	if err != nil {
		return nil, err
	}
	chl, err := ParseCHAPBinary(cStr)
	if err != nil {
		return nil, err
	}
	if len(chl) < minCHAPChallenge || len(chl) > maxCHAPBinary {
		return nil, fmt.Errorf("chap: target challenge of %d bytes, want %d to %d", len(chl), minCHAPChallenge, maxCHAPBinary)
	}
	if sentChallenges.contains(chl) {
		return nil, errors.New("chap: target challenge is one we sent (reflection attack refused)")
	}
	resp, err := CHAPResponse(alg, id, x.creds.Secret, chl)
	if err != nil {
		return nil, err
	}
	x.alg = alg
	out := [][2]string{{"CHAP_N", x.creds.User}, {"CHAP_R", FormatCHAPBinary(resp)}}
	if len(x.creds.MutualSecret) > 0 {
		h, _ := alg.newHash()
		x.mutualChl = make([]byte, max(minCHAPChallenge, h.Size()))
		var idb [1]byte
		if _, err := rand.Read(idb[:]); err != nil {
			return nil, fmt.Errorf("chap: random: %w", err)
		}
		// Never send the target's own challenge back (RFC 7143 section
		// 9.2.1); with random challenges a second draw always differs.
		for i := 0; i == 0 || subtle.ConstantTimeCompare(x.mutualChl, chl) == 1; i++ {
			if i > 1 {
				return nil, errors.New("chap: random challenge repeats the target's")
			}
			if _, err := rand.Read(x.mutualChl); err != nil {
				return nil, fmt.Errorf("chap: random: %w", err)
			}
		}
		sentChallenges.add(x.mutualChl)
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
	// The answer our own secret would give means the target holds one
	// secret for both directions (RFC 7143 section 9.2.1): a failure too.
	if own, err := CHAPResponse(x.alg, x.mutualID, x.creds.Secret, x.mutualChl); err == nil && subtle.ConstantTimeCompare(got, own) == 1 {
		return fmt.Errorf("chap: target answered with our own CHAP secret; each direction needs its own secret")
	}
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return fmt.Errorf("chap: target failed mutual authentication (wrong response)")
	}
	return nil
}

// Bounds on the target's challenge: RFC 7143 section 12.1.3 caps CHAP
// binary values at 1024 bytes, and section 9.2.1 asks for challenges as
// strong as the secrets (at least 96 random bits); 16 bytes is what LIO and
// tgt send at the least, and what we send.
const (
	minCHAPChallenge = 16
	maxCHAPBinary    = 1024
)

// parseCHAPIdentifier parses CHAP_I: the one-octet CHAP Identifier of RFC
// 1994 written, as targets write it, as an RFC 7143 section 6.1
// decimal-constant ("0" or digits without a leading zero), 0 to 255. Hex,
// signs, blanks and leading zeros (octal to some parsers) are refused so
// that the value is never ambiguous.
func parseCHAPIdentifier(s string) (byte, error) {
	n, ok := parseDecimalConstant(s, 255)
	if !ok {
		return 0, fmt.Errorf("chap: bad CHAP_I %q: want a decimal number 0 to 255", s)
	}
	return byte(n), nil
}

// parseDecimalConstant parses an RFC 7143 section 6.1 decimal-constant no
// larger than max (at most 999).
func parseDecimalConstant(s string, max int) (int, bool) {
	if len(s) == 0 || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n <= max
}
