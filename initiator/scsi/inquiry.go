package scsi

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// DeviceType is the PERIPHERAL DEVICE TYPE (SPC-4 table 141).
type DeviceType uint8

// Peripheral device types an initiator meets behind iSCSI targets.
const (
	TypeDisk         DeviceType = 0x00 // direct access block device (SBC)
	TypeTape         DeviceType = 0x01
	TypeCDROM        DeviceType = 0x05 // CD/DVD (MMC)
	TypeStorageArray DeviceType = 0x0c // storage array controller (RAID)
	TypeEnclosure    DeviceType = 0x0d
	TypeWellKnownLU  DeviceType = 0x1e
	TypeNoDevice     DeviceType = 0x1f // unknown or no device type
)

func (t DeviceType) String() string {
	switch t {
	case TypeDisk:
		return "disk"
	case TypeTape:
		return "tape"
	case TypeCDROM:
		return "cd/dvd"
	case TypeStorageArray:
		return "controller"
	case TypeEnclosure:
		return "enclosure"
	case TypeWellKnownLU:
		return "well known logical unit"
	case TypeNoDevice:
		return "no device"
	}
	return fmt.Sprintf("device type 0x%02x", uint8(t))
}

// Peripheral qualifier values (SPC-4 table 140).
const (
	QualifierConnected    uint8 = 0 // a device of that type is connected to this LU
	QualifierNotConnected uint8 = 1 // the LU could have one, none is connected now
	QualifierNoLU         uint8 = 3 // the target does not support a LU here
)

const (
	// StandardInquiryLength is the allocation length that covers the
	// standard INQUIRY fields this package decodes, except the version
	// descriptors (which need 74).
	StandardInquiryLength = 36
	inquiryHeaderLen      = 5
	versionDescOffset     = 58
	versionDescCount      = 8
)

// InquiryData is the standard INQUIRY data (SPC-4 6.6.2).
type InquiryData struct {
	PeripheralQualifier uint8
	DeviceType          DeviceType
	Removable           bool  // RMB
	Version             uint8 // 0x05 SPC-3, 0x06 SPC-4, 0x07 SPC-5
	NormACA             bool
	HiSup               bool
	ResponseDataFormat  uint8 // 2 for every current device
	SCCS                bool
	ACC                 bool
	TPGS                uint8 // target port group support (ALUA), 0-3
	ThirdPartyCopy      bool  // 3PC
	Protect             bool
	EncServ             bool
	MultiP              bool
	CmdQue              bool // command queuing (SAM-5 task management)
	// Vendor, Product and Revision are T10 VENDOR IDENTIFICATION, PRODUCT
	// IDENTIFICATION and PRODUCT REVISION LEVEL, trailing spaces and NULs
	// trimmed.
	Vendor, Product, Revision string
	// VersionDescriptors lists the non-zero VERSION DESCRIPTOR fields (the
	// standards the device claims), present when 74 bytes or more arrive.
	VersionDescriptors []uint16
}

// Connected reports whether a device is attached at this LUN: peripheral
// qualifier 0 and a device type other than TypeNoDevice.
func (d *InquiryData) Connected() bool {
	return d.PeripheralQualifier == QualifierConnected && d.DeviceType != TypeNoDevice
}

// ParseInquiry decodes standard INQUIRY data. The first five bytes are
// required. Like Linux, it reads the identification strings from whatever
// arrived of bytes 8 to 35 even when the ADDITIONAL LENGTH says the data
// ends earlier, so short or miscounted replies still identify the device.
func ParseInquiry(b []byte) (InquiryData, error) {
	if len(b) < inquiryHeaderLen {
		return InquiryData{}, fmt.Errorf("parse INQUIRY data: %d bytes, header needs %d: %w",
			len(b), inquiryHeaderLen, ErrShortData)
	}
	d := InquiryData{
		PeripheralQualifier: b[0] >> 5,
		DeviceType:          DeviceType(b[0] & 0x1f),
		Removable:           b[1]&0x80 != 0,
		Version:             b[2],
		NormACA:             b[3]&0x20 != 0,
		HiSup:               b[3]&0x10 != 0,
		ResponseDataFormat:  b[3] & 0x0f,
	}
	if len(b) > 5 {
		d.SCCS = b[5]&0x80 != 0
		d.ACC = b[5]&0x40 != 0
		d.TPGS = b[5] >> 4 & 3
		d.ThirdPartyCopy = b[5]&0x08 != 0
		d.Protect = b[5]&0x01 != 0
	}
	if len(b) > 6 {
		d.EncServ = b[6]&0x40 != 0
		d.MultiP = b[6]&0x10 != 0
	}
	if len(b) > 7 {
		d.CmdQue = b[7]&0x02 != 0
	}
	d.Vendor = inquiryString(b, 8, 16)
	d.Product = inquiryString(b, 16, 32)
	d.Revision = inquiryString(b, 32, 36)
	end := min(len(b), inquiryHeaderLen+int(b[4]))
	for i := range versionDescCount {
		o := versionDescOffset + 2*i
		if o+2 > end {
			break
		}
		if v := binary.BigEndian.Uint16(b[o : o+2]); v != 0 {
			d.VersionDescriptors = append(d.VersionDescriptors, v)
		}
	}
	return d, nil
}

// inquiryString returns b[from:to], as far as it goes, with trailing
// spaces and NULs trimmed.
func inquiryString(b []byte, from, to int) string {
	if from >= len(b) {
		return ""
	}
	return string(bytes.TrimRight(b[from:min(to, len(b))], " \x00"))
}

// Marshal encodes the standard INQUIRY data as a target sends it: 36 bytes,
// or 74 when there are version descriptors. Identification strings are
// space padded and cut to their field widths.
func (d *InquiryData) Marshal() []byte {
	n := StandardInquiryLength
	if len(d.VersionDescriptors) > 0 {
		n = versionDescOffset + 2*versionDescCount
	}
	b := make([]byte, n)
	b[0] = d.PeripheralQualifier<<5 | byte(d.DeviceType&0x1f)
	b[1] = flag(d.Removable, 0x80)
	b[2] = d.Version
	b[3] = flag(d.NormACA, 0x20) | flag(d.HiSup, 0x10) | d.ResponseDataFormat&0x0f
	b[4] = byte(n - inquiryHeaderLen)
	b[5] = flag(d.SCCS, 0x80) | flag(d.ACC, 0x40) | (d.TPGS&3)<<4 |
		flag(d.ThirdPartyCopy, 0x08) | flag(d.Protect, 0x01)
	b[6] = flag(d.EncServ, 0x40) | flag(d.MultiP, 0x10)
	b[7] = flag(d.CmdQue, 0x02)
	putPadded(b[8:16], d.Vendor)
	putPadded(b[16:32], d.Product)
	putPadded(b[32:36], d.Revision)
	for i, v := range d.VersionDescriptors {
		if i == versionDescCount {
			break
		}
		binary.BigEndian.PutUint16(b[versionDescOffset+2*i:], v)
	}
	return b
}

func putPadded(dst []byte, s string) {
	n := copy(dst, s)
	for i := n; i < len(dst); i++ {
		dst[i] = ' '
	}
}

func flag(set bool, bit byte) byte {
	if set {
		return bit
	}
	return 0
}
