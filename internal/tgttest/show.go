package tgttest

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Session is one I_T nexus of a target, from tgtadm --op show.
type Session struct {
	Nexus       uint64   // tgt's I_T nexus id; for iSCSI the session's TSIH
	Initiator   string   // InitiatorName the initiator logged in with
	Alias       string   // InitiatorAlias, "" when none
	Connections []string // initiator IP address of each connection
	// ISID is the initiator session ID the session was created with, from
	// tgtd's debug log (session_create); zero without Config.Trace.
	ISID [6]byte
}

// WireTSIH is the TSIH as an initiator reads it from the Login Response.
// tgt 1.0.85 copies the TSIH into the PDU in host byte order
// (usr/iscsi/iscsid.c: rsp->tsih = conn->tsih) and compares what comes
// back the same way, so on a little-endian host an initiator decoding it
// big-endian, as RFC 7143 says, sees Nexus 1 as TSIH 256. Harmless (the
// TSIH is opaque and echoed back byte for byte), but tests comparing
// TSIHs must swap.
func (s Session) WireTSIH() uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], uint16(s.Nexus))
	return binary.BigEndian.Uint16(b[:])
}

// Show returns tgtadm --mode target --op show.
func (s *Server) Show(ctx context.Context) (string, error) {
	return s.Tgtadm(ctx, "--mode", "target", "--op", "show")
}

// Sessions lists the logged-in sessions of target iqn. With Config.Trace
// (Start sets it) each carries its ISID.
func (s *Server) Sessions(ctx context.Context, iqn string) ([]Session, error) {
	out, err := s.Show(ctx)
	if err != nil {
		return nil, fmt.Errorf("tgttest: sessions: %w", err)
	}
	ss, err := parseSessions(out, iqn)
	if err != nil {
		return nil, err
	}
	if s.cfg.Trace && len(ss) > 0 {
		// tgtd logs session_create before the Login Response goes out;
		// Sync makes sure this reader has seen it.
		if err := s.Sync(ctx); err != nil {
			return nil, fmt.Errorf("tgttest: sessions: %w", err)
		}
		p := s.cur()
		for i := range ss {
			ss[i].ISID, _ = p.tr.isid(uint16(ss[i].Nexus))
		}
	}
	return ss, nil
}

// parseSessions reads the "I_T nexus information" block of target iqn:
//
//	Target 1: iqn...
//	    I_T nexus information:
//	        I_T nexus: 1
//	            Initiator: iqn.2008-11.org.linux-kvm alias: none
//	            Connection: 0
//	                IP Address: 127.0.0.1
//	    LUN information:
func parseSessions(show, iqn string) ([]Session, error) {
	var (
		out    []Session
		found  bool
		inThis bool
		inITN  bool
	)
	sc := bufio.NewScanner(strings.NewReader(show))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "Target "):
			_, name, _ := strings.Cut(line, ": ")
			inThis = name == iqn
			found = found || inThis
			inITN = false
		case !inThis:
		case line == "I_T nexus information:":
			inITN = true
		case strings.HasSuffix(line, "information:"):
			inITN = false
		case !inITN:
		case strings.HasPrefix(line, "I_T nexus: "):
			id, err := strconv.ParseUint(strings.TrimPrefix(line, "I_T nexus: "), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("tgttest: sessions: bad line %q", line)
			}
			out = append(out, Session{Nexus: id})
		case len(out) == 0:
		case strings.HasPrefix(line, "Initiator: "):
			rest := strings.TrimPrefix(line, "Initiator: ")
			name, alias, _ := strings.Cut(rest, " alias: ")
			if alias == "none" {
				alias = ""
			}
			out[len(out)-1].Initiator, out[len(out)-1].Alias = name, alias
		case strings.HasPrefix(line, "IP Address: "):
			c := &out[len(out)-1].Connections
			*c = append(*c, strings.TrimPrefix(line, "IP Address: "))
		}
	}
	if !found {
		return nil, fmt.Errorf("tgttest: sessions: no target %s", iqn)
	}
	return out, nil
}
