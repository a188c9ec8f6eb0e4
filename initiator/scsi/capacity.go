package scsi

import (
	"encoding/binary"
	"fmt"
)

// Lengths of READ CAPACITY parameter data.
const (
	ReadCapacity10Length = 8
	ReadCapacity16Length = 32
)

// Capacity10 is READ CAPACITY(10) parameter data (SBC-4 5.20.2).
type Capacity10 struct {
	LastLBA     uint32 // RETURNED LOGICAL BLOCK ADDRESS
	BlockLength uint32 // LOGICAL BLOCK LENGTH IN BYTES
}

// NeedsReadCapacity16 reports whether the medium is too large for READ
// CAPACITY(10) to describe, so READ CAPACITY(16) must be used.
func (c *Capacity10) NeedsReadCapacity16() bool { return c.LastLBA == 0xffffffff }

// ParseReadCapacity10 decodes READ CAPACITY(10) parameter data.
func ParseReadCapacity10(b []byte) (Capacity10, error) {
	if len(b) < ReadCapacity10Length {
		return Capacity10{}, fmt.Errorf("parse READ CAPACITY(10) data: %d bytes, need %d: %w",
			len(b), ReadCapacity10Length, ErrShortData)
	}
	return Capacity10{
		LastLBA:     binary.BigEndian.Uint32(b[0:4]),
		BlockLength: binary.BigEndian.Uint32(b[4:8]),
	}, nil
}

// Marshal encodes READ CAPACITY(10) parameter data.
func (c *Capacity10) Marshal() []byte {
	b := make([]byte, ReadCapacity10Length)
	binary.BigEndian.PutUint32(b[0:4], c.LastLBA)
	binary.BigEndian.PutUint32(b[4:8], c.BlockLength)
	return b
}

// Capacity16 is READ CAPACITY(16) parameter data (SBC-4 5.21.2).
type Capacity16 struct {
	LastLBA     uint64 // RETURNED LOGICAL BLOCK ADDRESS
	BlockLength uint32 // LOGICAL BLOCK LENGTH IN BYTES
	RCBasis     uint8  // what LastLBA is based on (SBC-4 table 61)
	PType       uint8  // P_TYPE: protection type - 1, when ProtEn
	ProtEn      bool   // PROT_EN: protection information enabled
	PIExponent  uint8  // P_I_EXPONENT
	// LogicalPerPhysicalExponent is LOGICAL BLOCKS PER PHYSICAL BLOCK
	// EXPONENT: a physical block holds 1<<exp logical blocks.
	LogicalPerPhysicalExponent uint8
	LBPME                      bool   // logical block provisioning (thin) enabled
	LBPRZ                      bool   // unmapped blocks read as zeros
	LowestAlignedLBA           uint16 // LOWEST ALIGNED LOGICAL BLOCK ADDRESS
}

// Blocks returns the number of logical blocks, LastLBA+1. It is 0 only
// when LastLBA is the largest uint64, which no device reports.
func (c *Capacity16) Blocks() uint64 { return c.LastLBA + 1 }

// PhysicalBlockLength returns the physical block length in bytes.
func (c *Capacity16) PhysicalBlockLength() uint64 {
	return uint64(c.BlockLength) << (c.LogicalPerPhysicalExponent & 0x0f)
}

// ProtectionType returns the T10 PI protection type, 0 when protection is
// off, else 1 to 3 (P_TYPE + 1).
func (c *Capacity16) ProtectionType() uint8 {
	if !c.ProtEn {
		return 0
	}
	return c.PType + 1
}

// ParseReadCapacity16 decodes READ CAPACITY(16) parameter data. The first
// 12 bytes (LBA and block length) are required; the flags in bytes 12 to 15
// read as zero when the data ends before them.
func ParseReadCapacity16(b []byte) (Capacity16, error) {
	if len(b) < 12 {
		return Capacity16{}, fmt.Errorf("parse READ CAPACITY(16) data: %d bytes, need at least 12: %w",
			len(b), ErrShortData)
	}
	c := Capacity16{
		LastLBA:     binary.BigEndian.Uint64(b[0:8]),
		BlockLength: binary.BigEndian.Uint32(b[8:12]),
	}
	if len(b) < 16 {
		return c, nil
	}
	c.RCBasis = b[12] >> 4 & 3
	c.PType = b[12] >> 1 & 7
	c.ProtEn = b[12]&0x01 != 0
	c.PIExponent = b[13] >> 4
	c.LogicalPerPhysicalExponent = b[13] & 0x0f
	c.LBPME = b[14]&0x80 != 0
	c.LBPRZ = b[14]&0x40 != 0
	c.LowestAlignedLBA = binary.BigEndian.Uint16(b[14:16]) & 0x3fff
	return c, nil
}

// Marshal encodes READ CAPACITY(16) parameter data, 32 bytes.
func (c *Capacity16) Marshal() []byte {
	b := make([]byte, ReadCapacity16Length)
	binary.BigEndian.PutUint64(b[0:8], c.LastLBA)
	binary.BigEndian.PutUint32(b[8:12], c.BlockLength)
	b[12] = (c.RCBasis&3)<<4 | (c.PType&7)<<1 | flag(c.ProtEn, 0x01)
	b[13] = c.PIExponent<<4 | c.LogicalPerPhysicalExponent&0x0f
	binary.BigEndian.PutUint16(b[14:16], c.LowestAlignedLBA&0x3fff)
	b[14] |= flag(c.LBPME, 0x80) | flag(c.LBPRZ, 0x40)
	return b
}
