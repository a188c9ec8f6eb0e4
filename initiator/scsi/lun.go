package scsi

import (
	"encoding/binary"
	"fmt"
)

// AddressMethod is the ADDRESS METHOD of the first level of a LUN (SAM-5
// 4.7.7, the top two bits of byte 0).
type AddressMethod uint8

// Address methods.
const (
	AddressPeripheral  AddressMethod = 0 // peripheral device addressing
	AddressFlat        AddressMethod = 1 // flat space addressing
	AddressLogicalUnit AddressMethod = 2 // logical unit addressing
	AddressExtended    AddressMethod = 3 // extended logical unit addressing
)

// MaxFlatLUN is one past the largest LUN flat space addressing can express.
const MaxFlatLUN = 1 << 14

// LUN is an eight-byte logical unit number as carried in REPORT LUNS data
// and in the LUN field of iSCSI PDUs.
type LUN [8]byte

// EncodeLUN encodes the single-level logical unit number n the way Linux's
// int_to_scsilun does for the LUN numbers it assigns: peripheral device
// addressing (bus 0) for n < 256, flat space addressing for n < 16384. It
// fails for larger n, which need extended addressing.
func EncodeLUN(n uint16) (LUN, error) {
	var l LUN
	switch {
	case n < 256:
		l[1] = byte(n)
	case n < MaxFlatLUN:
		binary.BigEndian.PutUint16(l[0:2], n|uint16(AddressFlat)<<14)
	default:
		return l, fmt.Errorf("encode LUN %d: above %d needs extended addressing: %w",
			n, MaxFlatLUN-1, ErrMalformed)
	}
	return l, nil
}

// DecodedLUN is a LUN split into its first-level fields.
type DecodedLUN struct {
	Method AddressMethod
	// Bus is the BUS IDENTIFIER of peripheral device addressing; Linux and
	// the targets this project talks to use 0.
	Bus uint8
	// Number is the logical unit number, valid when Simple.
	Number uint16
	// Simple is true for a single-level peripheral (bus 0) or flat space
	// LUN: one that EncodeLUN(Number) reproduces byte for byte.
	Simple bool
	// Raw is the LUN as received.
	Raw LUN
}

// DecodeLUN decodes a LUN. Peripheral device addressing with bus 0 and flat
// space addressing, with the lower levels zero, yield a Simple LUN with its
// Number; everything else (other buses, hierarchical, logical unit and
// extended addressing) is reported by Method and Raw only.
func DecodeLUN(l LUN) DecodedLUN {
	d := DecodedLUN{Method: AddressMethod(l[0] >> 6), Raw: l}
	lower := binary.BigEndian.Uint64(l[:]) & 0x0000ffffffffffff
	switch d.Method {
	case AddressPeripheral:
		d.Bus = l[0] & 0x3f
		d.Number = uint16(l[1])
		d.Simple = d.Bus == 0 && lower == 0
	case AddressFlat:
		d.Number = binary.BigEndian.Uint16(l[0:2]) & 0x3fff
		d.Simple = lower == 0
	}
	return d
}

// String formats a simple LUN as its number and anything else as 16 hex
// digits.
func (d DecodedLUN) String() string {
	if d.Simple {
		return fmt.Sprintf("%d", d.Number)
	}
	return fmt.Sprintf("%x", d.Raw[:])
}
