package textkey

// KV is one key=value pair, kept in the order it appeared on the wire.
type KV struct {
	Key, Value string
}

// String renders the pair as "key=value" for logs.
func (kv KV) String() string { return kv.Key + "=" + kv.Value }

// Limits from RFC 7143 section 6.1.
const (
	// MaxKeyLen is the longest key-name (standard-label): 63 bytes.
	MaxKeyLen = 63
	// MaxValueLen is the longest individual value of the keys in RFC 7143
	// section 13 and RFC 7145 section 6 (255 bytes, without the delimiter).
	// Negotiation enforces it per key; Parse does not.
	MaxValueLen = 255
	// MaxTextLen bounds any single value Parse accepts. Every implementation
	// must take 8192 bytes of key=value text in a negotiation, and the long
	// values (CHAP_C and CHAP_R large-binary-values) fit in it.
	MaxTextLen = 8192
)

// Parse decodes a logical text data segment: NUL-terminated key=value
// pairs. Trailing NUL padding is tolerated. It fails with a *SyntaxError
// (wrapping one of the Err* values) on a pair without '=', an empty or
// invalid key name, a value longer than MaxTextLen or not UTF-8, an empty
// pair between two others, or a last pair without its terminating NUL
// (ErrUnterminated: the caller has not yet joined all C-bit continuation
// segments). Duplicate keys are returned as they came.
func Parse(data []byte) ([]KV, error) {
	d := NewDecoder(data)
	var kvs []KV
	for d.Next() {
		kvs = append(kvs, KV{Key: d.Key(), Value: d.Value()})
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return kvs, nil
}

// Encode writes each pair as key=value followed by a NUL byte. It does not
// validate: use an Encoder when the pairs may come from untrusted input.
func Encode(kvs []KV) []byte {
	n := 0
	for _, kv := range kvs {
		n += len(kv.Key) + len(kv.Value) + 2
	}
	buf := make([]byte, 0, n)
	for _, kv := range kvs {
		buf = appendPair(buf, kv.Key, kv.Value)
	}
	return buf
}

// Get returns the value of the first pair named key.
func Get(kvs []KV, key string) (string, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// GetAll returns the values of every pair named key, in order.
func GetAll(kvs []KV, key string) []string {
	var vs []string
	for _, kv := range kvs {
		if kv.Key == key {
			vs = append(vs, kv.Value)
		}
	}
	return vs
}

func appendPair(buf []byte, key, value string) []byte {
	buf = append(buf, key...)
	buf = append(buf, '=')
	buf = append(buf, value...)
	return append(buf, 0)
}

// ValidKey reports whether name is a legal key-name (RFC 7143 section 6.1):
// 1 to 63 bytes of letters, digits and . - + @ _, starting with a letter.
// RFC 7143 asks for a capital first letter, but the registered keys
// iSCSIProtocolLevel (RFC 7144) and iSERHelloRequired (RFC 7145) start with
// 'i', so any letter is accepted. A '#' is accepted as the second byte after
// X, Y or Z, the public extension prefixes of RFC 7143 section 13.5 (X#name).
func ValidKey(name string) error {
	switch {
	case name == "":
		return ErrEmptyKey
	case len(name) > MaxKeyLen:
		return ErrKeyTooLong
	case !(name[0] >= 'A' && name[0] <= 'Z' || name[0] >= 'a' && name[0] <= 'z'):
		return ErrKeyChar
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if keyChar(c) {
			continue
		}
		if c == '#' && i == 1 && (name[0] == 'X' || name[0] == 'Y' || name[0] == 'Z') {
			continue
		}
		return ErrKeyChar
	}
	return nil
}

func keyChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '.', c == '-', c == '+', c == '@', c == '_':
		return true
	}
	return false
}
