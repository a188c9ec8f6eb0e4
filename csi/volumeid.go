package csi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/iser-attach/iser-attach/initiator"
)

// volumeIDPrefix starts every volume ID; its digit is the format's version.
const volumeIDPrefix = "iser1"

// maxLUN is the largest LUN of the flat addressing the initiator uses.
const maxLUN = 16383

// VolumeID names one LU of a target: "iser1:LUN:LUID:TARGET", e.g.
// "iser1:2:naa.60000000000000000e00000000010002:iqn.2026-11.org.example:pool".
// LUN is decimal without leading zeros; LUID is the LU's name from VPD page
// 0x83 as the initiator reports it (naa., eui. or t10. followed by letters,
// digits, '.', '-' or '_'); TARGET is the target's IQN or EUI name and comes
// last because it may itself contain ':'. A node checks the LUID after its
// login, so a LUN renumbered on the target is never taken for the volume.
type VolumeID struct {
	Target string
	LUN    uint16
	LUID   string
}

// String is the volume ID in the format ParseVolumeID reads.
func (v VolumeID) String() string {
	return volumeIDPrefix + ":" + strconv.Itoa(int(v.LUN)) + ":" + v.LUID + ":" + v.Target
}

// ErrBadVolumeID is wrapped by every error of ParseVolumeID.
var ErrBadVolumeID = errors.New("not an iser-attach volume ID")

// ParseVolumeID parses a volume ID written by VolumeID.String.
func ParseVolumeID(s string) (VolumeID, error) {
	parts := strings.SplitN(s, ":", 4)
	if len(parts) != 4 || parts[0] != volumeIDPrefix {
		return VolumeID{}, fmt.Errorf("parse volume ID %q: %w (want %s:LUN:LUID:TARGET)", s, ErrBadVolumeID, volumeIDPrefix)
	}
	lun, err := parseLUN(parts[1])
	if err != nil {
		return VolumeID{}, fmt.Errorf("parse volume ID %q: LUN: %w", s, err)
	}
	if err := CheckLUID(parts[2]); err != nil {
		return VolumeID{}, fmt.Errorf("parse volume ID %q: %w", s, err)
	}
	if err := initiator.CheckName(parts[3]); err != nil {
		return VolumeID{}, fmt.Errorf("parse volume ID %q: target: %w: %w", s, err, ErrBadVolumeID)
	}
	return VolumeID{Target: parts[3], LUN: lun, LUID: parts[2]}, nil
}

func parseLUN(s string) (uint16, error) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("%q: %w", s, ErrBadVolumeID)
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q: %w", s, ErrBadVolumeID)
		}
		n = n*10 + int(c-'0')
	}
	if n > maxLUN {
		return 0, fmt.Errorf("%d: above %d: %w", n, maxLUN, ErrBadVolumeID)
	}
	return uint16(n), nil
}

// CheckLUID reports whether s can stand in a volume ID as an LU's identity:
// naa., eui. or t10. and then 1 to 100 letters, digits, '.', '-' or '_'.
func CheckLUID(s string) error {
	kind, rest, ok := strings.Cut(s, ".")
	if !ok || (kind != "naa" && kind != "eui" && kind != "t10") || rest == "" || len(rest) > 100 {
		return fmt.Errorf("LU identity %q: want naa., eui. or t10. and a name: %w", s, ErrBadVolumeID)
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("LU identity %q: character %q: %w", s, c, ErrBadVolumeID)
		}
	}
	return nil
}
