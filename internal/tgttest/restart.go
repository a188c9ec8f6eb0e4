package tgttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Faults for recovery tests: a target that crashes and comes back, a target
// that hangs for a while, and a target that drops its connections.

// Restart crashes tgtd and starts it again: SIGKILL (no logout, no Async
// Message; the kernel closes its sockets), a pause of down during which the
// portal refuses connections, then a new tgtd on the same iSCSI port and
// control port with the same targets, LUNs, accounts and backing files.
// The backing files stay, so acknowledged writes survive (tgt writes them
// with pwrite; a killed process loses nothing that reached the page
// cache). Sessions do not: initiators must log in again, and the new tgtd
// knows nothing of their old sessions. Settings made through Tgtadm since
// Launch are lost, as with a real restart without a saved configuration.
// Commands, CommandLog and LastLines start afresh with the new process.
//
// ctx bounds the whole restart, down included. If tgtd cannot be started
// again Restart returns the error and Close ends quietly. Restart fails
// without restarting when tgtd had already exited on its own (a crash the
// test should see).
func (s *Server) Restart(ctx context.Context, down time.Duration) error {
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	p, stopped, closed := s.p, s.stopped, s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("tgttest: restart: server closed")
	}
	select {
	case <-p.exited:
		if !stopped {
			return fmt.Errorf("tgttest: restart: tgtd had exited on its own (%v):\n%s", p.waitErr, strings.Join(p.tr.lastLines(), "\n"))
		}
	default:
	}
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.kill(p)

	t := time.NewTimer(down)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return fmt.Errorf("tgttest: restart: %w", ctx.Err())
	}
	for {
		err := s.spawn(ctx)
		if err == nil {
			break
		}
		// errRetry: the port (or control port) is taken; it was ours a
		// moment ago, so whoever has it (a connect that happened to get it
		// as its local port, say) lets go soon.
		if !errors.Is(err, errRetry) || ctx.Err() != nil {
			return fmt.Errorf("tgttest: restart: %w", err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("tgttest: restart: %w (last attempt: %v)", ctx.Err(), err)
		}
	}
	s.mu.Lock()
	s.stopped = false
	s.mu.Unlock()
	if err := s.configure(ctx); err != nil {
		return fmt.Errorf("tgttest: restart: %w", err)
	}
	return nil
}

// Stall freezes tgtd (SIGSTOP) for d, then lets it go on (SIGCONT): a hung
// target. Its sockets stay open, so the kernel still completes TCP
// handshakes and buffers what initiators send; nothing is answered until
// tgtd runs again and works through the backlog. Only keepalives (NOP-Out)
// detect it. ctx cuts the pause short; tgtd is always resumed.
func (s *Server) Stall(ctx context.Context, d time.Duration) error {
	s.life.Lock()
	defer s.life.Unlock()
	p := s.cur()
	select {
	case <-p.exited:
		return errors.New("tgttest: stall: tgtd is not running")
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("tgttest: stall: %w", err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("tgttest: stall: %w", err)
	}
	return ctx.Err()
}

// Connection is one iSCSI connection of a target, from tgtadm --mode
// connection --op show.
type Connection struct {
	TSIH      uint16 // of its session (tgtadm's --sid)
	CID       uint32
	Initiator string
	Address   string // the initiator's IP address
}

// Connections lists the iSCSI connections of target iqn's sessions.
func (s *Server) Connections(ctx context.Context, iqn string) ([]Connection, error) {
	tid, err := s.tid(iqn)
	if err != nil {
		return nil, fmt.Errorf("tgttest: connections: %w", err)
	}
	out, err := s.Tgtadm(ctx, "--mode", "connection", "--op", "show", "--tid", tid)
	if err != nil {
		return nil, fmt.Errorf("tgttest: connections: %w", err)
	}
	return parseConnections(out)
}

// DropConnections force-closes every iSCSI connection of target iqn's
// sessions, as a target does when it resets its links: tgtadm --mode
// connection --op delete --tid T --sid TSIH --cid C, which tgt 1.0.85
// carries out by closing the TCP connection (no Async Message, no logout).
// The sessions end with their last connection once their tasks are done.
// It returns how many connections it closed; a connection that went away
// between listing and closing does not count.
func (s *Server) DropConnections(ctx context.Context, iqn string) (int, error) {
	conns, err := s.Connections(ctx, iqn)
	if err != nil {
		return 0, err
	}
	tid, _ := s.tid(iqn)
	n := 0
	for _, c := range conns {
		_, err := s.Tgtadm(ctx, "--mode", "connection", "--op", "delete", "--tid", tid,
			"--sid", strconv.Itoa(int(c.TSIH)), "--cid", strconv.FormatUint(uint64(c.CID), 10))
		if err != nil {
			if strings.Contains(err.Error(), "can't find the connection") || strings.Contains(err.Error(), "can't find the session") {
				continue
			}
			return n, fmt.Errorf("tgttest: drop connections: %w", err)
		}
		n++
	}
	return n, nil
}

// tid returns the target id of iqn as tgtadm wants it.
func (s *Server) tid(iqn string) (string, error) {
	for i, t := range s.cfg.Targets {
		if t.IQN == iqn {
			return strconv.Itoa(i + 1), nil
		}
	}
	return "", fmt.Errorf("no target %s", iqn)
}

// parseConnections reads tgtadm --mode connection --op show (usr/iscsi/target.c,
// iscsi_target_show_connections):
//
//	Session: 2
//	    Connection: 0
//	        Initiator: iqn.2026-11.io.iser-attach:test
//	        IP Address: 127.0.0.1
func parseConnections(show string) ([]Connection, error) {
	var out []Connection
	sc := bufio.NewScanner(strings.NewReader(show))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, _ := strings.Cut(line, ": ")
		switch {
		case key == "Session":
			n, err := strconv.ParseUint(val, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("tgttest: connections: bad line %q", line)
			}
			out = append(out, Connection{TSIH: uint16(n)})
		case len(out) == 0:
		case key == "Connection":
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("tgttest: connections: bad line %q", line)
			}
			out[len(out)-1].CID = uint32(n)
		case key == "Initiator":
			out[len(out)-1].Initiator = val
		case key == "IP Address":
			out[len(out)-1].Address = val
		}
	}
	return out, nil
}
