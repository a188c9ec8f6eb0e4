package tgttest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// InitiatorSockets counts the TCP sockets on this host, in this network
// namespace, that are connected to the server's portal and still open on
// the connecting side: ESTABLISHED, or CLOSE_WAIT (tgtd closed its end and
// the initiator has not). It reads /proc/net/tcp and /proc/net/tcp6.
//
// It tells an initiator's live connections apart from what tgtd lists:
// tgt keeps a session, and the closed connections in it, listed until the
// last task holding them is done (usr/iscsi/conn.c: conn_close leaves a
// task that is in the SCSI layer to its completion), so a reinstated
// session can stay listed after every socket it had is gone.
func (s *Server) InitiatorSockets() (int, error) {
	n := 0
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return 0, fmt.Errorf("tgttest: initiator sockets: %w", err)
		}
		c, err := countOpenTo(f, s.port)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("tgttest: initiator sockets: %s: %w", name, err)
		}
		n += c
	}
	return n, nil
}

// TCP states in /proc/net/tcp's st column (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpCloseWait   = 0x08
)

// countOpenTo counts the lines of a /proc/net/tcp table whose remote port
// is port and whose state is ESTABLISHED or CLOSE_WAIT.
func countOpenTo(r io.Reader, port int) (int, error) {
	sc := bufio.NewScanner(r)
	n := 0
	first := true
	for sc.Scan() {
		if first { // the header line
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			return 0, fmt.Errorf("short line %q", sc.Text())
		}
		_, rport, ok := strings.Cut(f[2], ":")
		if !ok {
			return 0, fmt.Errorf("remote address %q: no port", f[2])
		}
		p, err := strconv.ParseUint(rport, 16, 16)
		if err != nil {
			return 0, fmt.Errorf("remote port %q: %w", rport, err)
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return 0, fmt.Errorf("state %q: %w", f[3], err)
		}
		if int(p) == port && (st == tcpEstablished || st == tcpCloseWait) {
			n++
		}
	}
	return n, sc.Err()
}
