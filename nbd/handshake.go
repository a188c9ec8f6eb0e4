package nbd

import (
	"encoding/binary"
	"fmt"
	"io"
)

// handshake runs fixed newstyle negotiation (proto.md "Handshake"). It
// returns the export and geometry the client chose with NBD_OPT_GO or
// NBD_OPT_EXPORT_NAME, or a nil export when the client sent NBD_OPT_ABORT.
// An error means the connection must be dropped: a protocol violation, an
// unknown export in NBD_OPT_EXPORT_NAME (which cannot be answered with an
// error), or an I/O failure.
func (c *conn) handshake() (*Export, geometry, error) {
	var b [18]byte
	binary.BigEndian.PutUint64(b[0:8], nbdMagic)
	binary.BigEndian.PutUint64(b[8:16], iHaveOpt)
	binary.BigEndian.PutUint16(b[16:18], flagFixedNewstyle|flagNoZeroes)
	if _, err := c.bw.Write(b[:]); err != nil {
		return nil, geometry{}, fmt.Errorf("handshake: send greeting: %w", err)
	}
	if err := c.bw.Flush(); err != nil {
		return nil, geometry{}, fmt.Errorf("handshake: send greeting: %w", err)
	}
	if _, err := io.ReadFull(c.br, b[:4]); err != nil {
		return nil, geometry{}, fmt.Errorf("handshake: read client flags: %w", err)
	}
	clientFlags := binary.BigEndian.Uint32(b[:4])
	if clientFlags&^(flagCFixedNewstyle|flagCNoZeroes) != 0 {
		// proto.md: the server MUST drop the connection on unknown flags.
		return nil, geometry{}, fmt.Errorf("handshake: unknown client flags %#x", clientFlags)
	}
	h := &haggler{c: c, noZeroes: clientFlags&flagCNoZeroes != 0}
	for {
		exp, g, done, err := h.option()
		if err != nil || done {
			return exp, g, err
		}
	}
}

// haggler answers options one at a time.
type haggler struct {
	c        *conn
	noZeroes bool
	out      []byte // replies to the current option, flushed together
}

// option reads and answers one option. done is true when option haggling is
// over: exp is then the chosen export, or nil after NBD_OPT_ABORT.
func (h *haggler) option() (exp *Export, g geometry, done bool, err error) {
	var hb [optHeaderLen]byte
	if _, err := io.ReadFull(h.c.br, hb[:]); err != nil {
		return nil, g, true, fmt.Errorf("handshake: read option: %w", err)
	}
	oh, err := parseOptionHeader(hb[:])
	if err != nil {
		return nil, g, true, fmt.Errorf("handshake: %w", err)
	}
	h.out = h.out[:0]

	switch oh.Option {
	case optExportName:
		if oh.Length > maxOptionLen {
			return nil, g, true, fmt.Errorf("handshake: NBD_OPT_EXPORT_NAME: name of %d bytes", oh.Length)
		}
		name, err := h.readData(oh.Length)
		if err != nil {
			return nil, g, true, err
		}
		e, ok := h.c.srv.lookup(string(name))
		if !ok {
			return nil, g, true, fmt.Errorf("handshake: NBD_OPT_EXPORT_NAME: unknown export %q", name)
		}
		if g, err = e.geometry(); err != nil {
			return nil, g, true, fmt.Errorf("handshake: NBD_OPT_EXPORT_NAME: %w", err)
		}
		h.out = append(h.out, exportNameReply(&g, h.noZeroes)...)
		return e, g, true, h.flush(oh.Option)

	case optAbort:
		if err := h.skip(oh.Length); err != nil {
			return nil, g, true, err
		}
		h.reply(oh.Option, repAck, nil)
		// The client may already have closed; a failed ACK is not an error.
		h.flush(oh.Option)
		return nil, g, true, nil

	case optList:
		if oh.Length != 0 {
			if err := h.skip(oh.Length); err != nil {
				return nil, g, true, err
			}
			h.replyErr(oh.Option, repErrInvalid, "NBD_OPT_LIST carries no data")
			return nil, g, false, h.flush(oh.Option)
		}
		for _, e := range h.c.srv.exports {
			h.reply(oh.Option, repServer, serverData(e.Name, e.Description))
		}
		h.reply(oh.Option, repAck, nil)
		return nil, g, false, h.flush(oh.Option)

	case optInfo, optGo:
		if oh.Length > maxOptionLen {
			if err := h.skip(oh.Length); err != nil {
				return nil, g, true, err
			}
			h.replyErr(oh.Option, repErrTooBig, "option data too long")
			return nil, g, false, h.flush(oh.Option)
		}
		data, err := h.readData(oh.Length)
		if err != nil {
			return nil, g, true, err
		}
		exp, g, ok := h.info(oh.Option, data)
		if err := h.flush(oh.Option); err != nil {
			return nil, g, true, err
		}
		if ok && oh.Option == optGo {
			return exp, g, true, nil
		}
		return nil, g, false, nil

	default:
		// NBD_OPT_STARTTLS, NBD_OPT_STRUCTURED_REPLY, the metadata-context
		// and extended-header options, and anything unknown.
		if err := h.skip(oh.Length); err != nil {
			return nil, g, true, err
		}
		h.replyErr(oh.Option, repErrUnsup, "")
		return nil, g, false, h.flush(oh.Option)
	}
}

// info answers NBD_OPT_INFO or NBD_OPT_GO and reports whether it succeeded.
func (h *haggler) info(option uint32, data []byte) (*Export, geometry, bool) {
	req, err := parseInfoRequest(data)
	if err != nil {
		h.replyErr(option, repErrInvalid, err.Error())
		return nil, geometry{}, false
	}
	e, ok := h.c.srv.lookup(req.Name)
	if !ok {
		h.replyErr(option, repErrUnknown, fmt.Sprintf("unknown export %q", req.Name))
		return nil, geometry{}, false
	}
	g, err := e.geometry()
	if err != nil {
		h.replyErr(option, repErrUnknown, err.Error())
		return nil, geometry{}, false
	}
	h.reply(option, repInfo, infoExportData(&g))
	// The server may send NBD_INFO_BLOCK_SIZE unrequested; always sending it
	// lets every client learn the alignment the server enforces.
	h.reply(option, repInfo, infoBlockSizeData(&g))
	var sentName, sentDesc bool
	for _, t := range req.Infos {
		switch {
		case t == infoName && !sentName:
			sentName = true
			h.reply(option, repInfo, infoStringData(infoName, e.Name))
		case t == infoDescription && !sentDesc:
			sentDesc = true
			if e.Description != "" {
				h.reply(option, repInfo, infoStringData(infoDescription, e.Description))
			}
		}
	}
	h.reply(option, repAck, nil)
	return e, g, true
}

func (h *haggler) reply(option, replyType uint32, data []byte) {
	h.out = appendOptionReply(h.out, option, replyType, data)
}

func (h *haggler) replyErr(option, replyType uint32, msg string) {
	h.out = appendOptionReply(h.out, option, replyType, []byte(msg))
}

func (h *haggler) flush(option uint32) error {
	if _, err := h.c.bw.Write(h.out); err != nil {
		return fmt.Errorf("handshake: reply to option %d: %w", option, err)
	}
	if err := h.c.bw.Flush(); err != nil {
		return fmt.Errorf("handshake: reply to option %d: %w", option, err)
	}
	return nil
}

func (h *haggler) readData(n uint32) ([]byte, error) {
	data := make([]byte, n)
	if _, err := io.ReadFull(h.c.br, data); err != nil {
		return nil, fmt.Errorf("handshake: read option data: %w", err)
	}
	return data, nil
}

// skip discards option data the server does not keep, without buffering it.
func (h *haggler) skip(n uint32) error {
	if _, err := io.CopyN(io.Discard, h.c.br, int64(n)); err != nil {
		return fmt.Errorf("handshake: skip option data: %w", err)
	}
	return nil
}
