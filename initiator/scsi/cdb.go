package scsi

import (
	"encoding/binary"
	"fmt"
)

// MaxCDBLength is the longest CDB this package builds; it is also the size
// of the CDB field in the iSCSI BHS (RFC 7143 section 11.3.5).
const MaxCDBLength = 16

// CDB is a command descriptor block of at most MaxCDBLength bytes. It is a
// value type so that building one for every I/O allocates nothing.
type CDB struct {
	b [MaxCDBLength]byte
	n uint8
}

func newCDB(op Opcode, n int) CDB {
	c := CDB{n: uint8(n)}
	c.b[0] = byte(op)
	return c
}

// Bytes returns the CDB bytes in a slice of their own.
func (c CDB) Bytes() []byte { return c.b[:c.n] }

// Len returns the CDB length in bytes: 6, 10, 12 or 16.
func (c CDB) Len() int { return int(c.n) }

// Opcode returns the OPERATION CODE of the CDB.
func (c CDB) Opcode() Opcode { return Opcode(c.b[0]) }

// String formats the CDB as its command name followed by its bytes in hex,
// in the style of sg_raw: "READ(10) [28 00 00 00 00 08 00 00 01 00]".
func (c CDB) String() string {
	return fmt.Sprintf("%v [% x]", c.Opcode(), c.b[:c.n])
}

// Flag bits in byte 1 of READ and WRITE CDBs (SBC-4 5.15, 5.39).
const (
	cdbFUA = 0x08 // force unit access
)

// TestUnitReady builds TEST UNIT READY (SPC-4 6.47).
func TestUnitReady() CDB { return newCDB(OpTestUnitReady, 6) }

// RequestSense builds REQUEST SENSE (SPC-4 6.39). desc asks for descriptor
// format sense data; alloc is the ALLOCATION LENGTH (252 holds any sense).
func RequestSense(desc bool, alloc uint8) CDB {
	c := newCDB(OpRequestSense, 6)
	if desc {
		c.b[1] = 0x01
	}
	c.b[4] = alloc
	return c
}

// Inquiry builds INQUIRY for the standard INQUIRY data (SPC-4 6.6). 36 bytes
// is what Linux asks for first; 96 or more also covers the version
// descriptors.
func Inquiry(alloc uint16) CDB {
	c := newCDB(OpInquiry, 6)
	binary.BigEndian.PutUint16(c.b[3:5], alloc)
	return c
}

// InquiryVPD builds INQUIRY with EVPD set for the vital product data page
// page (SPC-4 6.6, 7.8).
func InquiryVPD(page uint8, alloc uint16) CDB {
	c := Inquiry(alloc)
	c.b[1] = 0x01
	c.b[2] = page
	return c
}

// ReadCapacity10 builds READ CAPACITY(10) (SBC-4 5.20). The target returns 8
// bytes.
func ReadCapacity10() CDB { return newCDB(OpReadCapacity10, 10) }

// ReadCapacity16 builds READ CAPACITY(16), SERVICE ACTION IN(16) with
// service action 0x10 (SBC-4 5.21). alloc is usually ReadCapacity16Length.
func ReadCapacity16(alloc uint32) CDB {
	c := newCDB(OpServiceActionIn16, 16)
	c.b[1] = saReadCapacity16
	binary.BigEndian.PutUint32(c.b[10:14], alloc)
	return c
}

// ReportLUNs builds REPORT LUNS (SPC-4 6.33). selectReport 0 lists the
// logical units addressable through the I_T nexus; alloc must be at least 16.
func ReportLUNs(selectReport uint8, alloc uint32) CDB {
	c := newCDB(OpReportLUNs, 12)
	c.b[2] = selectReport
	binary.BigEndian.PutUint32(c.b[6:10], alloc)
	return c
}

// Read10 builds READ(10) (SBC-4 5.15). A transfer length of 0 transfers no
// data.
func Read10(lba uint32, blocks uint16, fua bool) CDB {
	return rw10(OpRead10, lba, blocks, fua)
}

// Write10 builds WRITE(10) (SBC-4 5.39). fua makes the target write the
// blocks to the medium before it reports GOOD status.
func Write10(lba uint32, blocks uint16, fua bool) CDB {
	return rw10(OpWrite10, lba, blocks, fua)
}

// Read16 builds READ(16) (SBC-4 5.17).
func Read16(lba uint64, blocks uint32, fua bool) CDB {
	return rw16(OpRead16, lba, blocks, fua)
}

// Write16 builds WRITE(16) (SBC-4 5.41).
func Write16(lba uint64, blocks uint32, fua bool) CDB {
	return rw16(OpWrite16, lba, blocks, fua)
}

// Fits10 reports whether a transfer of blocks starting at lba can be
// expressed by a 10-byte READ or WRITE: the LBA fits in 32 bits and the
// TRANSFER LENGTH in 16.
func Fits10(lba uint64, blocks uint32) bool {
	return lba <= 0xffffffff && blocks <= 0xffff
}

// Read returns READ(10) when Fits10(lba, blocks), else READ(16), as the Linux
// sd driver does for devices that support both.
func Read(lba uint64, blocks uint32, fua bool) CDB {
	if Fits10(lba, blocks) {
		return Read10(uint32(lba), uint16(blocks), fua)
	}
	return Read16(lba, blocks, fua)
}

// Write returns WRITE(10) when Fits10(lba, blocks), else WRITE(16).
func Write(lba uint64, blocks uint32, fua bool) CDB {
	if Fits10(lba, blocks) {
		return Write10(uint32(lba), uint16(blocks), fua)
	}
	return Write16(lba, blocks, fua)
}

func rw10(op Opcode, lba uint32, blocks uint16, fua bool) CDB {
	c := newCDB(op, 10)
	if fua {
		c.b[1] = cdbFUA
	}
	binary.BigEndian.PutUint32(c.b[2:6], lba)
	binary.BigEndian.PutUint16(c.b[7:9], blocks)
	return c
}

func rw16(op Opcode, lba uint64, blocks uint32, fua bool) CDB {
	c := newCDB(op, 16)
	if fua {
		c.b[1] = cdbFUA
	}
	binary.BigEndian.PutUint64(c.b[2:10], lba)
	binary.BigEndian.PutUint32(c.b[10:14], blocks)
	return c
}

// SynchronizeCache10 builds SYNCHRONIZE CACHE(10) (SBC-4 5.32). lba 0 and
// blocks 0 flush the whole medium. immed asks for status before the flush
// completes; an initiator implementing a flush barrier leaves it false.
func SynchronizeCache10(lba uint32, blocks uint16, immed bool) CDB {
	c := newCDB(OpSynchronizeCache10, 10)
	if immed {
		c.b[1] = 0x02
	}
	binary.BigEndian.PutUint32(c.b[2:6], lba)
	binary.BigEndian.PutUint16(c.b[7:9], blocks)
	return c
}

// SynchronizeCache16 builds SYNCHRONIZE CACHE(16) (SBC-4 5.33); blocks 0
// means from lba to the end of the medium.
func SynchronizeCache16(lba uint64, blocks uint32, immed bool) CDB {
	c := newCDB(OpSynchronizeCache16, 16)
	if immed {
		c.b[1] = 0x02
	}
	binary.BigEndian.PutUint64(c.b[2:10], lba)
	binary.BigEndian.PutUint32(c.b[10:14], blocks)
	return c
}

// WriteSame16 builds WRITE SAME(16) (SBC-4 5.48). With unmap set the target
// may deallocate the blocks instead of writing them (Linux uses this for
// discard when VPD page 0xB2 reports LBPWS). With ndob set no data-out buffer
// is sent and the blocks read back as zeros; without it the command carries
// one logical block of data.
func WriteSame16(lba uint64, blocks uint32, unmap, ndob bool) CDB {
	c := newCDB(OpWriteSame16, 16)
	if unmap {
		c.b[1] |= 0x08
	}
	if ndob {
		c.b[1] |= 0x01
	}
	binary.BigEndian.PutUint64(c.b[2:10], lba)
	binary.BigEndian.PutUint32(c.b[10:14], blocks)
	return c
}

// PageControl is the PC field of MODE SENSE: which values to return.
type PageControl uint8

// Page control values (SPC-4 6.11.1).
const (
	PCCurrent    PageControl = 0
	PCChangeable PageControl = 1
	PCDefault    PageControl = 2
	PCSaved      PageControl = 3
)

// Mode page codes (SPC-4 7.5, SBC-4 6.5).
const (
	ModePageCaching     uint8 = 0x08
	ModePageControlMode uint8 = 0x0a
	ModePageAll         uint8 = 0x3f
)

// ModeSense6 builds MODE SENSE(6) (SPC-4 6.11). dbd disables block
// descriptors in the reply. Linux asks for page 0x08 with alloc 192 or less.
func ModeSense6(dbd bool, pc PageControl, page, subpage uint8, alloc uint8) CDB {
	c := newCDB(OpModeSense6, 6)
	if dbd {
		c.b[1] = 0x08
	}
	c.b[2] = byte(pc&3)<<6 | page&0x3f
	c.b[3] = subpage
	c.b[4] = alloc
	return c
}

// ModeSense10 builds MODE SENSE(10) (SPC-4 6.12). llbaa allows 16-byte block
// descriptors.
func ModeSense10(dbd, llbaa bool, pc PageControl, page, subpage uint8, alloc uint16) CDB {
	c := newCDB(OpModeSense10, 10)
	if dbd {
		c.b[1] |= 0x08
	}
	if llbaa {
		c.b[1] |= 0x10
	}
	c.b[2] = byte(pc&3)<<6 | page&0x3f
	c.b[3] = subpage
	binary.BigEndian.PutUint16(c.b[7:9], alloc)
	return c
}
