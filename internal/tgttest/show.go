package tgttest

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Session is one I_T nexus of a target, from tgtadm --op show.
type Session struct {
	Nexus       uint64   // tgt's I_T nexus id
	Initiator   string   // InitiatorName the initiator logged in with
	Alias       string   // InitiatorAlias, "" when none
	Connections []string // initiator IP address of each connection
}

// Show returns tgtadm --mode target --op show.
func (s *Server) Show(ctx context.Context) (string, error) {
	return s.Tgtadm(ctx, "--mode", "target", "--op", "show")
}

// Sessions lists the logged-in sessions of target iqn.
func (s *Server) Sessions(ctx context.Context, iqn string) ([]Session, error) {
	out, err := s.Show(ctx)
	if err != nil {
		return nil, fmt.Errorf("tgttest: sessions: %w", err)
	}
	return parseSessions(out, iqn)
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
