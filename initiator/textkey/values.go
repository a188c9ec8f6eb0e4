package textkey

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ParseNumber decodes a numerical-value (RFC 7143 section 6.1): an unsigned
// integer below 2**64 written as a decimal-constant or as a hex-constant
// with a 0x or 0X prefix. Signs, spaces and empty strings are refused.
func ParseNumber(s string) (uint64, error) {
	digits, base := s, 10
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		digits, base = s[2:], 16
	}
	if digits == "" {
		return 0, fmt.Errorf("parse numerical value %q: empty", s)
	}
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		ok := c >= '0' && c <= '9' ||
			base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
		if !ok {
			return 0, fmt.Errorf("parse numerical value %q: invalid digit %q", s, c)
		}
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		return 0, fmt.Errorf("parse numerical value %q: %w", s, err)
	}
	return v, nil
}

// FormatNumber writes a numerical-value in decimal.
func FormatNumber(v uint64) string { return strconv.FormatUint(v, 10) }

// ParseBool decodes a boolean-value: exactly "Yes" or "No".
func ParseBool(s string) (bool, error) {
	switch s {
	case Yes:
		return true, nil
	case No:
		return false, nil
	}
	return false, fmt.Errorf("parse boolean value %q: want Yes or No", s)
}

// FormatBool writes Yes or No.
func FormatBool(b bool) string {
	if b {
		return Yes
	}
	return No
}

// SplitList splits a list-of-values at its commas.
func SplitList(s string) []string { return strings.Split(s, ",") }

func isSpecial(v string) bool {
	return v == Irrelevant || v == Reject || v == NotUnderstood
}

var errRange = errors.New("out of range")

// number parses v for a numeric key and checks its range.
func (d *Def) number(v string) (uint64, error) {
	x, err := ParseNumber(v)
	if err != nil {
		return 0, err
	}
	if x == 0 && d.ZeroUnlimited {
		return 0, nil
	}
	if x < d.Min || x > d.Max {
		return x, fmt.Errorf("%w: %s must be %d..%d", errRange, d.Name, d.Min, d.Max)
	}
	return x, nil
}

// less orders numeric values of d, with 0 above everything when d treats
// zero as "no limit".
func (d *Def) less(a, b uint64) bool {
	if d.ZeroUnlimited {
		if a == 0 {
			a = math.MaxUint64
		}
		if b == 0 {
			b = math.MaxUint64
		}
	}
	return a < b
}

// checkList validates a list-of-values: non-empty elements of at most
// MaxLen bytes each.
func (d *Def) checkList(v string) error {
	for _, e := range SplitList(v) {
		if e == "" {
			return errors.New("empty element in value list")
		}
		if len(e) > d.MaxLen {
			return fmt.Errorf("list element longer than %d bytes", d.MaxLen)
		}
	}
	return nil
}

// check validates one (non-special) value of d as either side may send it:
// a list for List keys, a single value otherwise.
func (d *Def) check(v string) error {
	switch d.Kind {
	case List:
		return d.checkList(v)
	case NumMin, NumMax:
		_, err := d.number(v)
		return err
	case BoolAnd, BoolOr:
		_, err := ParseBool(v)
		return err
	}
	// Declarative.
	if len(v) > d.MaxLen {
		return fmt.Errorf("value longer than %d bytes", d.MaxLen)
	}
	if d.Numeric {
		_, err := d.number(v)
		return err
	}
	if len(d.Values) > 0 && !slices.Contains(d.Values, v) {
		return fmt.Errorf("want one of %s", strings.Join(d.Values, ", "))
	}
	return nil
}
