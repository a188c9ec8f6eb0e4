package textkey

import (
	"bytes"
	"unicode/utf8"
)

// Decoder walks NUL-terminated key=value pairs one at a time, with a sticky
// error in the style of mdlayher/netlink's AttributeDecoder:
//
//	d := textkey.NewDecoder(data)
//	for d.Next() {
//		use(d.Key(), d.Value())
//	}
//	if err := d.Err(); err != nil { ... }
//
// A Decoder is not safe for concurrent use.
type Decoder struct {
	data       []byte
	off        int
	key, value string
	err        error
}

// NewDecoder returns a Decoder reading data. It does not copy data; Key and
// Value return copies.
func NewDecoder(data []byte) *Decoder { return &Decoder{data: data} }

// Next advances to the next pair. It returns false at the end of the text
// (trailing NUL padding included) or on the first error; check Err.
func (d *Decoder) Next() bool {
	if d.err != nil || d.off >= len(d.data) {
		return false
	}
	rest := d.data[d.off:]
	if rest[0] == 0 {
		// Padding: only NULs may follow.
		for _, b := range rest {
			if b != 0 {
				d.err = &SyntaxError{Offset: d.off, Err: ErrEmptyPair}
				return false
			}
		}
		d.off = len(d.data)
		return false
	}
	end := bytes.IndexByte(rest, 0)
	if end < 0 {
		d.err = &SyntaxError{Offset: d.off, Key: keyHint(rest), Err: ErrUnterminated}
		return false
	}
	pair := rest[:end]
	eq := bytes.IndexByte(pair, '=')
	if eq < 0 {
		d.err = &SyntaxError{Offset: d.off, Err: ErrMissingEquals}
		return false
	}
	key := string(pair[:eq])
	if err := ValidKey(key); err != nil {
		d.err = &SyntaxError{Offset: d.off, Key: clip(key), Err: err}
		return false
	}
	value := pair[eq+1:]
	if err := checkValue(value); err != nil {
		d.err = &SyntaxError{Offset: d.off, Key: key, Err: err}
		return false
	}
	d.key, d.value = key, string(value)
	d.off += end + 1
	return true
}

// Key is the current pair's key.
func (d *Decoder) Key() string { return d.key }

// Value is the current pair's value.
func (d *Decoder) Value() string { return d.value }

// Err is the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Offset is the number of input bytes consumed so far.
func (d *Decoder) Offset() int { return d.off }

func checkValue[T string | []byte](v T) error {
	switch {
	case len(v) > MaxTextLen:
		return ErrValueTooLong
	case bytes.IndexByte([]byte(v), 0) >= 0:
		return ErrValueNUL
	case !utf8.Valid([]byte(v)):
		return ErrValueUTF8
	}
	return nil
}

// keyHint names the key of a partial pair for error messages.
func keyHint(b []byte) string {
	if eq := bytes.IndexByte(b, '='); eq >= 0 {
		b = b[:eq]
	}
	if ValidKey(string(b)) != nil {
		return ""
	}
	return string(b)
}

func clip(s string) string {
	if len(s) > MaxKeyLen+1 {
		return s[:MaxKeyLen+1] + "..."
	}
	return s
}
