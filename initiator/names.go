package initiator

import (
	"fmt"
	"strings"
)

// MaxNameLength is the longest iSCSI name, in bytes (RFC 7143 section
// 4.2.7.1).
const MaxNameLength = 223

// CheckName checks the shape of an iSCSI name (RFC 7143 section 4.2.7):
// "iqn.", "eui." or "naa." (any case) followed by at least one character,
// at most MaxNameLength bytes, no spaces or control characters. It does not
// check the date and naming authority of an iqn. name, as targets do not.
func CheckName(name string) error {
	if len(name) > MaxNameLength {
		return fmt.Errorf("iSCSI name longer than %d bytes", MaxNameLength)
	}
	if strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("%q: spaces or control characters in an iSCSI name", name)
	}
	lower := strings.ToLower(name)
	if len(name) < 5 || !(strings.HasPrefix(lower, "iqn.") || strings.HasPrefix(lower, "eui.") || strings.HasPrefix(lower, "naa.")) {
		return fmt.Errorf("%q is not an iSCSI name (iqn..., eui... or naa...)", name)
	}
	return nil
}
