package textkey

// Encoder builds a text data segment from validated pairs, with a sticky
// error: the first invalid key or value stops all further writes.
//
// An Encoder is not safe for concurrent use.
type Encoder struct {
	buf []byte
	err error
}

// NewEncoder returns an empty Encoder.
func NewEncoder() *Encoder { return &Encoder{} }

// Add appends key=value and its NUL terminator after checking the key name
// (ValidKey) and the value (UTF-8, no NUL, at most MaxTextLen bytes).
func (e *Encoder) Add(key, value string) {
	if e.err != nil {
		return
	}
	if err := ValidKey(key); err != nil {
		e.err = &SyntaxError{Offset: len(e.buf), Key: clip(key), Err: err}
		return
	}
	if err := checkValue(value); err != nil {
		e.err = &SyntaxError{Offset: len(e.buf), Key: key, Err: err}
		return
	}
	e.buf = appendPair(e.buf, key, value)
}

// AddKV appends every pair in order.
func (e *Encoder) AddKV(kvs ...KV) {
	for _, kv := range kvs {
		e.Add(kv.Key, kv.Value)
	}
}

// Len is the number of bytes encoded so far.
func (e *Encoder) Len() int { return len(e.buf) }

// Err is the first error met, or nil.
func (e *Encoder) Err() error { return e.err }

// Bytes returns the encoded text, or the first error.
func (e *Encoder) Bytes() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	return e.buf, nil
}
