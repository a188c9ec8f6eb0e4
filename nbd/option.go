package nbd

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// optionHeader is the fixed part of a client option (proto.md "Newstyle
// negotiation"); Length bytes of option data follow it.
type optionHeader struct {
	Option uint32
	Length uint32
}

func parseOptionHeader(b []byte) (optionHeader, error) {
	if len(b) < optHeaderLen {
		return optionHeader{}, fmt.Errorf("parse option: short header (%d bytes)", len(b))
	}
	if m := binary.BigEndian.Uint64(b[0:8]); m != iHaveOpt {
		return optionHeader{}, fmt.Errorf("parse option: bad magic %#016x", m)
	}
	return optionHeader{
		Option: binary.BigEndian.Uint32(b[8:12]),
		Length: binary.BigEndian.Uint32(b[12:16]),
	}, nil
}

func appendOptionHeader(b []byte, h optionHeader) []byte {
	b = binary.BigEndian.AppendUint64(b, iHaveOpt)
	b = binary.BigEndian.AppendUint32(b, h.Option)
	return binary.BigEndian.AppendUint32(b, h.Length)
}

// infoRequest is the data of NBD_OPT_INFO and NBD_OPT_GO: an export name and
// the information types the client asks for.
type infoRequest struct {
	Name  string
	Infos []uint16
}

var errInfoRequest = errors.New("malformed NBD_OPT_INFO/NBD_OPT_GO data")

// parseInfoRequest decodes NBD_OPT_INFO/NBD_OPT_GO data:
//
//	32 bits name length, name, 16 bits count, count * 16 bits info type
//
// and rejects trailing or missing bytes (the server answers
// NBD_REP_ERR_INVALID).
func parseInfoRequest(data []byte) (infoRequest, error) {
	if len(data) < 6 {
		return infoRequest{}, fmt.Errorf("parse info request: %w: %d bytes", errInfoRequest, len(data))
	}
	nameLen := binary.BigEndian.Uint32(data[0:4])
	if uint64(nameLen) > uint64(len(data)-6) {
		return infoRequest{}, fmt.Errorf("parse info request: %w: name length %d exceeds data", errInfoRequest, nameLen)
	}
	rest := data[4+nameLen:]
	n := int(binary.BigEndian.Uint16(rest[0:2]))
	rest = rest[2:]
	if len(rest) != 2*n {
		return infoRequest{}, fmt.Errorf("parse info request: %w: %d info types but %d bytes", errInfoRequest, n, len(rest))
	}
	r := infoRequest{Name: string(data[4 : 4+nameLen])}
	if n > 0 {
		r.Infos = make([]uint16, n)
		for i := range r.Infos {
			r.Infos[i] = binary.BigEndian.Uint16(rest[2*i:])
		}
	}
	return r, nil
}

func appendInfoRequest(b []byte, r infoRequest) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Name)))
	b = append(b, r.Name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Infos)))
	for _, t := range r.Infos {
		b = binary.BigEndian.AppendUint16(b, t)
	}
	return b
}

// appendOptionReply encodes a fixed-newstyle option reply.
func appendOptionReply(b []byte, option, replyType uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, optReplyMagic)
	b = binary.BigEndian.AppendUint32(b, option)
	b = binary.BigEndian.AppendUint32(b, replyType)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// The NBD_REP_INFO payloads.

func infoExportData(g *geometry) []byte {
	b := binary.BigEndian.AppendUint16(nil, infoExport)
	b = binary.BigEndian.AppendUint64(b, uint64(g.size))
	return binary.BigEndian.AppendUint16(b, g.flags)
}

func infoBlockSizeData(g *geometry) []byte {
	b := binary.BigEndian.AppendUint16(nil, infoBlockSize)
	b = binary.BigEndian.AppendUint32(b, g.minBlock)
	b = binary.BigEndian.AppendUint32(b, g.prefBlock)
	return binary.BigEndian.AppendUint32(b, g.maxBlock)
}

func infoStringData(infoType uint16, s string) []byte {
	b := binary.BigEndian.AppendUint16(nil, infoType)
	return append(b, s...)
}

// serverData is the payload of NBD_REP_SERVER: the name, then the
// description as the human-readable remainder.
func serverData(name, description string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	return append(b, description...)
}

// exportNameReply is the answer to NBD_OPT_EXPORT_NAME: size, transmission
// flags and, unless the client set NBD_FLAG_C_NO_ZEROES, 124 zero bytes.
func exportNameReply(g *geometry, noZeroes bool) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(g.size))
	b = binary.BigEndian.AppendUint16(b, g.flags)
	if !noZeroes {
		b = append(b, make([]byte, 124)...)
	}
	return b
}
