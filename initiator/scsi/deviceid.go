package scsi

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
)

// CodeSet is the CODE SET of a designation descriptor.
type CodeSet uint8

// Code sets (SPC-4 table 596).
const (
	CodeSetBinary CodeSet = 1
	CodeSetASCII  CodeSet = 2
	CodeSetUTF8   CodeSet = 3
)

// Association says what a designator names.
type Association uint8

// Associations (SPC-4 table 597).
const (
	AssocLogicalUnit  Association = 0
	AssocTargetPort   Association = 1
	AssocTargetDevice Association = 2
)

// DesignatorType is the DESIGNATOR TYPE of a designation descriptor.
type DesignatorType uint8

// Designator types (SPC-4 table 598).
const (
	DesignatorVendorSpecific     DesignatorType = 0x0
	DesignatorT10VendorID        DesignatorType = 0x1
	DesignatorEUI64              DesignatorType = 0x2
	DesignatorNAA                DesignatorType = 0x3
	DesignatorRelativeTargetPort DesignatorType = 0x4
	DesignatorTargetPortGroup    DesignatorType = 0x5
	DesignatorLogicalUnitGroup   DesignatorType = 0x6
	DesignatorMD5LogicalUnit     DesignatorType = 0x7
	DesignatorSCSIName           DesignatorType = 0x8
	DesignatorProtocolPort       DesignatorType = 0x9
	DesignatorUUID               DesignatorType = 0xa
)

// Designator is one designation descriptor of VPD page 0x83 (SPC-4
// 7.8.6.1).
type Designator struct {
	ProtocolIdentifier uint8 // meaningful when PIV (5 is iSCSI)
	CodeSet            CodeSet
	PIV                bool
	Association        Association
	Type               DesignatorType
	Value              []byte // the DESIGNATOR field, a copy
}

// String formats the designator the way Linux's scsi_vpd_lun_id and
// /sys/block/*/device/wwid do: "naa." or "eui." and lower-case hex, "t10."
// and the vendor id with non-printable bytes escaped, a SCSI name string
// as is up to its first NUL. Other types are their type number and hex.
func (d *Designator) String() string {
	switch d.Type {
	case DesignatorNAA:
		return "naa." + hex.EncodeToString(d.Value)
	case DesignatorEUI64:
		return "eui." + hex.EncodeToString(d.Value)
	case DesignatorT10VendorID:
		return "t10." + escapeNonPrintable(d.Value)
	case DesignatorSCSIName:
		v, _, _ := bytes.Cut(d.Value, []byte{0})
		return string(v)
	}
	return fmt.Sprintf("type%d.%x", uint8(d.Type), d.Value)
}

// escapeNonPrintable escapes bytes outside printable ASCII the way the
// kernel's %pE does: C escapes where one exists, else octal.
func escapeNonPrintable(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		switch {
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		case c == 0:
			sb.WriteString(`\0`)
		case c == '\a':
			sb.WriteString(`\a`)
		case c == 0x1b:
			sb.WriteString(`\e`)
		case c == '\t':
			sb.WriteString(`\t`)
		case c == '\n':
			sb.WriteString(`\n`)
		case c == '\v':
			sb.WriteString(`\v`)
		case c == '\f':
			sb.WriteString(`\f`)
		case c == '\r':
			sb.WriteString(`\r`)
		default:
			fmt.Fprintf(&sb, `\%03o`, c)
		}
	}
	return sb.String()
}

// DeviceIdentification is VPD page 0x83: every designation descriptor in
// the order the target sent them.
type DeviceIdentification struct {
	Designators []Designator
}

const designatorHeaderLen = 4

// ParseDeviceIdentification decodes VPD page 0x83. A descriptor that runs
// past the page is an error.
func ParseDeviceIdentification(b []byte) (DeviceIdentification, error) {
	body, err := vpdBody(b, VPDDeviceIdentification)
	if err != nil {
		return DeviceIdentification{}, err
	}
	var id DeviceIdentification
	for off := 0; off < len(body); {
		if off+designatorHeaderLen > len(body) {
			return DeviceIdentification{}, fmt.Errorf("parse VPD page 0x83: descriptor at offset %d: header runs past page end %d: %w",
				off+vpdHeaderLen, len(body)+vpdHeaderLen, ErrMalformed)
		}
		d := body[off:]
		end := off + designatorHeaderLen + int(d[3])
		if end > len(body) {
			return DeviceIdentification{}, fmt.Errorf("parse VPD page 0x83: descriptor at offset %d: length %d runs past page end %d: %w",
				off+vpdHeaderLen, d[3], len(body)+vpdHeaderLen, ErrMalformed)
		}
		id.Designators = append(id.Designators, Designator{
			ProtocolIdentifier: d[0] >> 4,
			CodeSet:            CodeSet(d[0] & 0x0f),
			PIV:                d[1]&0x80 != 0,
			Association:        Association(d[1] >> 4 & 3),
			Type:               DesignatorType(d[1] & 0x0f),
			Value:              append([]byte{}, body[off+designatorHeaderLen:end]...),
		})
		off = end
	}
	return id, nil
}

// Marshal encodes VPD page 0x83. Designators longer than 255 bytes are
// cut to 255, the most the DESIGNATOR LENGTH field can say.
func (id *DeviceIdentification) Marshal() []byte {
	var body []byte
	for _, d := range id.Designators {
		v := d.Value[:min(len(d.Value), 255)]
		body = append(body,
			d.ProtocolIdentifier<<4|byte(d.CodeSet&0x0f),
			flag(d.PIV, 0x80)|byte(d.Association&3)<<4|byte(d.Type&0x0f),
			0, byte(len(v)))
		body = append(body, v...)
	}
	return vpdPage(VPDDeviceIdentification, body)
}

// LogicalUnitName picks the designator that names the logical unit, the
// one Linux reports as its wwid: among designators associated with the
// logical unit, an NAA (preferring IEEE Registered Extended, NAA 6, then
// Registered, NAA 5, then the others; 8 or 16 bytes), else the longest
// EUI-64 (8, 12 or 16 bytes), else a SCSI name string, else a T10 vendor
// ID. The first of equals wins.
func (id *DeviceIdentification) LogicalUnitName() (Designator, bool) {
	best, bestRank := -1, 0
	for i := range id.Designators {
		if r := lunNameRank(&id.Designators[i]); r > bestRank {
			best, bestRank = i, r
		}
	}
	if best < 0 {
		return Designator{}, false
	}
	return id.Designators[best], true
}

// WWID returns LogicalUnitName formatted as by Designator.String, or ""
// when the page names no logical unit.
func (id *DeviceIdentification) WWID() string {
	d, ok := id.LogicalUnitName()
	if !ok {
		return ""
	}
	return d.String()
}

// lunNameRank orders candidate logical unit names; 0 means not a candidate.
func lunNameRank(d *Designator) int {
	if d.Association != AssocLogicalUnit {
		return 0
	}
	n := len(d.Value)
	switch d.Type {
	case DesignatorNAA:
		if n != 8 && n != 16 {
			return 0
		}
		switch d.Value[0] >> 4 {
		case 6:
			return 400
		case 5:
			return 399
		}
		return 398
	case DesignatorEUI64:
		if n != 8 && n != 12 && n != 16 {
			return 0
		}
		return 300 + n
	case DesignatorSCSIName:
		if n == 0 {
			return 0
		}
		return 200
	case DesignatorT10VendorID:
		if n == 0 {
			return 0
		}
		return 100
	}
	return 0
}
