package scsi

import (
	"encoding/binary"
	"fmt"
)

// UnmapDescriptor is one UNMAP block descriptor (SBC-4 5.36.2): Blocks
// logical blocks starting at LBA.
type UnmapDescriptor struct {
	LBA    uint64
	Blocks uint32
}

const (
	unmapHeaderLen     = 8
	unmapDescriptorLen = 16
	// MaxUnmapDescriptors is the most descriptors an UNMAP parameter list
	// can carry: its PARAMETER LIST LENGTH is 16 bits. Targets usually allow
	// far fewer; see BlockLimits.MaxUnmapDescriptorCount.
	MaxUnmapDescriptors = (0xffff - unmapHeaderLen) / unmapDescriptorLen
)

// Unmap builds UNMAP (SBC-4 5.36). paramLen is the length of the parameter
// list that follows as Data-Out, as returned by UnmapParameterList.
func Unmap(paramLen uint16, anchor bool) CDB {
	c := newCDB(OpUnmap, 10)
	if anchor {
		c.b[1] = 0x01
	}
	binary.BigEndian.PutUint16(c.b[7:9], paramLen)
	return c
}

// UnmapParameterList builds the UNMAP parameter list for descs: an 8-byte
// header followed by one 16-byte block descriptor each.
func UnmapParameterList(descs []UnmapDescriptor) ([]byte, error) {
	if len(descs) > MaxUnmapDescriptors {
		return nil, fmt.Errorf("build UNMAP parameter list: %d descriptors, at most %d fit: %w",
			len(descs), MaxUnmapDescriptors, ErrMalformed)
	}
	n := unmapHeaderLen + unmapDescriptorLen*len(descs)
	b := make([]byte, n)
	binary.BigEndian.PutUint16(b[0:2], uint16(n-2))
	binary.BigEndian.PutUint16(b[2:4], uint16(n-unmapHeaderLen))
	for i, d := range descs {
		o := unmapHeaderLen + unmapDescriptorLen*i
		binary.BigEndian.PutUint64(b[o:o+8], d.LBA)
		binary.BigEndian.PutUint32(b[o+8:o+12], d.Blocks)
	}
	return b, nil
}

// ParseUnmapParameterList decodes an UNMAP parameter list, the target's view
// of UnmapParameterList. It checks both length fields against the buffer.
func ParseUnmapParameterList(b []byte) ([]UnmapDescriptor, error) {
	if len(b) < unmapHeaderLen {
		return nil, fmt.Errorf("parse UNMAP parameter list: %d bytes, header needs %d: %w",
			len(b), unmapHeaderLen, ErrShortData)
	}
	dataLen := int(binary.BigEndian.Uint16(b[0:2]))
	descLen := int(binary.BigEndian.Uint16(b[2:4]))
	if descLen%unmapDescriptorLen != 0 || dataLen < descLen+unmapHeaderLen-2 {
		return nil, fmt.Errorf("parse UNMAP parameter list: data length %d, descriptor data length %d: %w",
			dataLen, descLen, ErrMalformed)
	}
	if unmapHeaderLen+descLen > len(b) {
		return nil, fmt.Errorf("parse UNMAP parameter list: descriptors need %d bytes, have %d: %w",
			unmapHeaderLen+descLen, len(b), ErrShortData)
	}
	descs := make([]UnmapDescriptor, descLen/unmapDescriptorLen)
	for i := range descs {
		o := unmapHeaderLen + unmapDescriptorLen*i
		descs[i] = UnmapDescriptor{
			LBA:    binary.BigEndian.Uint64(b[o : o+8]),
			Blocks: binary.BigEndian.Uint32(b[o+8 : o+12]),
		}
	}
	return descs, nil
}
