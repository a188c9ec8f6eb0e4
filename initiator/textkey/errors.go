package textkey

import (
	"errors"
	"fmt"
)

// Syntax errors, wrapped in a *SyntaxError by Parse, Decoder and Encoder.
var (
	ErrMissingEquals = errors.New("pair has no '='")
	ErrEmptyKey      = errors.New("empty key name")
	ErrKeyTooLong    = errors.New("key name longer than 63 bytes")
	ErrKeyChar       = errors.New("key name must start with a letter and hold only letters, digits and . - + @ _")
	ErrValueTooLong  = errors.New("value longer than 8192 bytes")
	ErrValueUTF8     = errors.New("value is not UTF-8")
	ErrValueNUL      = errors.New("value holds a NUL byte")
	ErrEmptyPair     = errors.New("empty pair before more text")
	ErrUnterminated  = errors.New("last pair not NUL-terminated (join C-bit continuation segments first)")
)

// SyntaxError reports malformed key=value text.
type SyntaxError struct {
	Offset int    // byte offset of the offending pair in the input
	Key    string // the key, when one was read
	Err    error  // one of the Err* values
}

func (e *SyntaxError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("parse text keys: offset %d: key %q: %v", e.Offset, e.Key, e.Err)
	}
	return fmt.Sprintf("parse text keys: offset %d: %v", e.Offset, e.Err)
}

func (e *SyntaxError) Unwrap() error { return e.Err }

// ProtocolError is a negotiation rule the target broke (RFC 7143 section
// 6.2 and 13). The login must fail; RFC 7143 section 6.2 lets either side
// end the login on a protocol error.
type ProtocolError struct {
	Key    string
	Value  string
	Reason string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("negotiate %s=%q: %s", e.Key, e.Value, e.Reason)
}

func protoErr(key, value, format string, args ...any) *ProtocolError {
	return &ProtocolError{Key: key, Value: value, Reason: fmt.Sprintf(format, args...)}
}
