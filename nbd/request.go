package nbd

import (
	"encoding/binary"
	"fmt"
)

// request is a transmission-phase request header (proto.md "Request
// message"). For NBD_CMD_WRITE, Length bytes of payload follow it.
type request struct {
	Flags  uint16
	Type   uint16
	Handle uint64 // the client's cookie, echoed in the reply
	Offset uint64
	Length uint32
}

// parseRequest decodes a 28-byte request header. A wrong magic means the
// stream is out of step; the caller must drop the connection.
func parseRequest(b []byte) (request, error) {
	if len(b) < requestHeaderLen {
		return request{}, fmt.Errorf("parse request: short header (%d bytes)", len(b))
	}
	if m := binary.BigEndian.Uint32(b[0:4]); m != requestMagic {
		return request{}, fmt.Errorf("parse request: bad magic %#08x", m)
	}
	return request{
		Flags:  binary.BigEndian.Uint16(b[4:6]),
		Type:   binary.BigEndian.Uint16(b[6:8]),
		Handle: binary.BigEndian.Uint64(b[8:16]),
		Offset: binary.BigEndian.Uint64(b[16:24]),
		Length: binary.BigEndian.Uint32(b[24:28]),
	}, nil
}

// appendRequest encodes r; the server never sends requests, but tests and the
// fuzz corpus need the inverse of parseRequest.
func appendRequest(b []byte, r request) []byte {
	b = binary.BigEndian.AppendUint32(b, requestMagic)
	b = binary.BigEndian.AppendUint16(b, r.Flags)
	b = binary.BigEndian.AppendUint16(b, r.Type)
	b = binary.BigEndian.AppendUint64(b, r.Handle)
	b = binary.BigEndian.AppendUint64(b, r.Offset)
	return binary.BigEndian.AppendUint32(b, r.Length)
}

// putSimpleReply encodes a simple reply header into b[:16].
func putSimpleReply(b []byte, errno uint32, handle uint64) {
	binary.BigEndian.PutUint32(b[0:4], simpleReplyMag)
	binary.BigEndian.PutUint32(b[4:8], errno)
	binary.BigEndian.PutUint64(b[8:16], handle)
}

// hasPayload reports whether the client sends Length bytes after the header.
// Only NBD_CMD_WRITE does (structured-reply extensions that add payloads to
// other commands are not negotiated).
func (r request) hasPayload() bool { return r.Type == cmdWrite }

// check validates r against the export and returns 0 or the NBD error to
// reply with. Every request passes through here before it reaches the
// Backend, so the Backend only sees in-range, aligned, supported requests.
//
// Error choices follow proto.md: EPERM for a write to a read-only export,
// ENOSPC for a write or write-zeroes past the end, EINVAL for everything else
// that is malformed (reads or trims past the end, misalignment to the minimum
// block size, unknown flags, commands that were not negotiated, READ/WRITE
// longer than the 32 MiB maximum block size).
func (g *geometry) check(r request) uint32 {
	switch r.Type {
	case cmdRead:
		if r.Flags&^cmdFlagFUA != 0 {
			return errInval
		}
		return g.checkRange(r, errInval, true)
	case cmdWrite:
		if r.Flags&^cmdFlagFUA != 0 {
			return errInval
		}
		if g.readOnly {
			return errPerm
		}
		return g.checkRange(r, errNoSpc, true)
	case cmdFlush:
		if r.Flags&^cmdFlagFUA != 0 || r.Offset != 0 || r.Length != 0 {
			return errInval
		}
		return 0
	case cmdTrim:
		if r.Flags&^cmdFlagFUA != 0 {
			return errInval
		}
		if g.readOnly {
			return errPerm
		}
		if !g.canTrim {
			return errInval
		}
		return g.checkRange(r, errInval, false)
	case cmdWriteZeroes:
		if r.Flags&^(cmdFlagFUA|cmdFlagNoHole) != 0 {
			return errInval
		}
		if g.readOnly {
			return errPerm
		}
		if !g.canWriteZeroes {
			return errInval
		}
		return g.checkRange(r, errNoSpc, false)
	}
	// NBD_CMD_CACHE, NBD_CMD_BLOCK_STATUS and NBD_CMD_RESIZE were not
	// advertised (no SEND_CACHE, no structured replies, no SEND_RESIZE);
	// unknown types likewise get EINVAL.
	return errInval
}

// checkRange bounds-checks and alignment-checks r. pastEnd is the error for
// a range beyond the export; payload marks READ/WRITE, whose length is also
// capped at the maximum block size.
func (g *geometry) checkRange(r request, pastEnd uint32, payload bool) uint32 {
	if r.Length == 0 {
		return errInval
	}
	if payload && r.Length > maxPayload {
		return errInval
	}
	end := r.Offset + uint64(r.Length)
	if end < r.Offset || end > uint64(g.size) {
		return pastEnd
	}
	if r.Offset%uint64(g.minBlock) != 0 || uint64(r.Length)%uint64(g.minBlock) != 0 {
		return errInval
	}
	return 0
}
