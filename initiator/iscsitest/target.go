package iscsitest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// Handler answers one request. It returns the PDUs to send back, in order;
// Raw PDUs are written as given (for malformed headers).
type Handler func(t *Target, req *pdu.PDU) []Reply

// Reply is one PDU to send, or raw bytes.
type Reply struct {
	PDU *pdu.PDU
	Raw []byte
	// Close closes the connection after this reply.
	Close bool
	// Delay is waited before the reply is written (a slow or trickling
	// target); the requests after it wait too.
	Delay time.Duration
}

// Target serves one connection.
type Target struct {
	tb   testing.TB
	conn net.Conn
	h    Handler

	mu       sync.Mutex
	StatSN   uint32
	ExpCmdSN uint32
	MaxCmdSN uint32
	// Window is MaxCmdSN - ExpCmdSN + 1 advertised in replies (default 32).
	Window   uint32
	Requests []*pdu.PDU // everything received, in order

	done chan struct{}
}

// Serve runs h on conn until the connection closes. It is stopped by the
// test's cleanup.
func Serve(tb testing.TB, conn net.Conn, h Handler) *Target {
	t := &Target{tb: tb, conn: conn, h: h, Window: 32, done: make(chan struct{})}
	go t.loop()
	tb.Cleanup(func() {
		conn.Close()
		<-t.done
	})
	return t
}

// Listen serves every connection to a new TCP listener on 127.0.0.1 with
// h, each on its own Target: a portal for a test that dials, as a command
// does. It returns the listener's address and the count of connections
// accepted; the listener closes when the test ends.
func Listen(tb testing.TB, h Handler) (string, *atomic.Int32) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			Serve(tb, c, h)
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String(), &n
}

// Pipe returns the initiator's end of a net.Pipe whose other end is served by h.
func Pipe(tb testing.TB, h Handler) (net.Conn, *Target) {
	a, b := net.Pipe()
	return a, Serve(tb, b, h)
}

func (t *Target) loop() {
	defer close(t.done)
	for {
		req, err := ReadPDU(t.conn)
		if err != nil {
			return
		}
		t.mu.Lock()
		t.Requests = append(t.Requests, req)
		t.mu.Unlock()
		for _, r := range t.h(t, req) {
			if r.Delay > 0 {
				time.Sleep(r.Delay)
			}
			var err error
			if r.Raw != nil {
				_, err = t.conn.Write(r.Raw)
			} else if r.PDU != nil {
				err = WritePDU(t.conn, r.PDU)
			}
			if err != nil || r.Close {
				t.conn.Close()
				return
			}
		}
	}
}

// Seen returns the requests received so far.
func (t *Target) Seen() []*pdu.PDU {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*pdu.PDU(nil), t.Requests...)
}

// SNs returns the sequence numbers for a reply that consumes a StatSN,
// acknowledging the request's CmdSN when cmdSN is non-nil.
func (t *Target) SNs(advance bool) pdu.TargetSNs {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := pdu.TargetSNs{StatSN: t.StatSN, ExpCmdSN: t.ExpCmdSN, MaxCmdSN: t.ExpCmdSN + t.Window - 1}
	if advance {
		t.StatSN++
	}
	return s
}

// Ack records a non-immediate request's CmdSN as received.
func (t *Target) Ack(req *pdu.PDU) {
	if req.BHS.Immediate() {
		return
	}
	cmdSN := binary.BigEndian.Uint32(req.BHS[24:28])
	t.mu.Lock()
	if cmdSN+1 > t.ExpCmdSN || t.ExpCmdSN == 0 {
		t.ExpCmdSN = cmdSN + 1
	}
	t.mu.Unlock()
}

// ReadPDU reads one PDU (no digests).
func ReadPDU(r io.Reader) (*pdu.PDU, error) {
	p := &pdu.PDU{}
	if _, err := io.ReadFull(r, p.BHS[:]); err != nil {
		return nil, err
	}
	if n := p.BHS.TotalAHSLength(); n > 0 {
		p.AHS = make([]byte, n)
		if _, err := io.ReadFull(r, p.AHS); err != nil {
			return nil, err
		}
	}
	n := p.BHS.DataSegmentLength()
	if n > 0 {
		buf := make([]byte, n+(4-n%4)%4)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		p.Data = buf[:n]
	}
	return p, nil
}

// WritePDU writes one PDU with padding (no digests).
func WritePDU(w io.Writer, p *pdu.PDU) error {
	p.BHS.SetDataSegmentLength(len(p.Data))
	p.BHS.SetTotalAHSLength(len(p.AHS))
	buf := append(append(append([]byte{}, p.BHS[:]...), p.AHS...), p.Data...)
	buf = append(buf, make([]byte, (4-len(p.Data)%4)%4)...)
	_, err := w.Write(buf)
	return err
}

// LoginOptions shape the default login handler.
type LoginOptions struct {
	// Keys are the target's answers in operational negotiation; nil means
	// it echoes the initiator's offers (accepting them as they are).
	Keys []textkey.KV
	// Status fails the login with this class and detail when non-zero.
	StatusClass, StatusDetail uint8
}

// Login answers Login Requests: one exchange per stage, moving to full
// feature phase when asked. It returns nil for other PDUs.
func (t *Target) Login(req *pdu.PDU, o LoginOptions) []Reply {
	if req.BHS.Opcode() != pdu.OpLoginReq {
		return nil
	}
	var lr pdu.LoginRequest
	if err := lr.Unmarshal(&req.BHS); err != nil {
		t.tb.Errorf("iscsitest: %v", err)
		return nil
	}
	t.mu.Lock()
	if t.ExpCmdSN == 0 {
		t.ExpCmdSN = lr.CmdSN
	}
	t.mu.Unlock()
	resp := pdu.LoginResponse{Transit: lr.Transit, CSG: lr.CSG, NSG: lr.NSG, ISID: lr.ISID,
		TSIH: 0x42, ITT: lr.ITT, TargetSNs: t.SNs(true),
		StatusClass: o.StatusClass, StatusDetail: o.StatusDetail}
	var out []textkey.KV
	kvs, _ := textkey.Parse(req.Data)
	if lr.CSG == pdu.StageSecurity {
		if _, ok := textkey.Get(kvs, "AuthMethod"); ok {
			out = append(out, textkey.KV{Key: "AuthMethod", Value: "None"})
		}
		out = append(out, textkey.KV{Key: "TargetPortalGroupTag", Value: "1"})
	} else if lr.CSG == pdu.StageOperational {
		if o.Keys != nil {
			out = o.Keys
		} else {
			for _, kv := range kvs {
				v := kv.Value
				if i := indexComma(v); i >= 0 {
					v = v[:i] // first of a list
				}
				out = append(out, textkey.KV{Key: kv.Key, Value: v})
			}
		}
	}
	return []Reply{{PDU: pdu.NewPDU(&resp, textkey.Encode(out))}}
}

func indexComma(s string) int {
	for i := range s {
		if s[i] == ',' {
			return i
		}
	}
	return -1
}

// ErrUnexpected is reported by handlers for requests they do not script.
var ErrUnexpected = errors.New("iscsitest: unexpected request")

// Unexpected fails the test for a request the handler did not expect.
func (t *Target) Unexpected(req *pdu.PDU) []Reply {
	t.tb.Errorf("%v: %s", ErrUnexpected, req.BHS.Opcode())
	return nil
}

// Good answers a SCSI Command with GOOD status and no data, or a NOP-Out
// ping with a NOP-In, or a Logout with a Logout Response.
func (t *Target) Good(req *pdu.PDU) []Reply {
	t.Ack(req)
	switch req.BHS.Opcode() {
	case pdu.OpSCSICommand:
		var c pdu.SCSICommand
		_ = c.Unmarshal(&req.BHS)
		r := pdu.SCSIResponse{ITT: c.ITT, TargetSNs: t.SNs(true)}
		if c.Read {
			r.Underflow, r.ResidualCount = true, c.ExpectedDataTransferLength
		}
		return []Reply{{PDU: pdu.NewPDU(&r, nil)}}
	case pdu.OpNOPOut:
		var n pdu.NOPOut
		_ = n.Unmarshal(&req.BHS)
		if n.ITT == 0xffffffff {
			return nil
		}
		r := pdu.NOPIn{ITT: n.ITT, TTT: 0xffffffff, TargetSNs: t.SNs(true)}
		return []Reply{{PDU: pdu.NewPDU(&r, req.Data)}}
	case pdu.OpLogoutReq:
		r := pdu.LogoutResponse{ITT: req.BHS.ITT(), TargetSNs: t.SNs(true)}
		return []Reply{{PDU: pdu.NewPDU(&r, nil), Close: true}}
	case pdu.OpTaskMgmtReq:
		r := pdu.TaskMgmtResponse{ITT: req.BHS.ITT(), TargetSNs: t.SNs(true)}
		return []Reply{{PDU: pdu.NewPDU(&r, nil)}}
	}
	return t.Unexpected(req)
}

// String describes a PDU for test messages.
func String(p *pdu.PDU) string {
	return fmt.Sprintf("%s itt=%#x dlen=%d", p.BHS.Opcode(), p.BHS.ITT(), len(p.Data))
}
