package tgttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

var errNoTrace = errors.New("command tracing is off (Config.Trace)")

// Sync waits until every command tgtd finished before Sync was called is
// counted. Call it after the initiator has its responses and before
// Commands. It runs a tgtadm request with a marker and waits for tgtd's
// debug log to show it: tgtd logs a command's backing-store completion
// before it sends the response, and its log is one ordered pipe.
func (s *Server) Sync(ctx context.Context) error {
	if !s.cfg.Trace {
		return fmt.Errorf("tgttest: sync: %w", errNoTrace)
	}
	id := 900000000 + int(s.marker.Add(1))
	p := s.cur()
	seen := p.tr.expect(id)
	// tgtd logs mtask_execute with the tid before it fails the request
	// ("can't find the target"), so the error is expected.
	s.Tgtadm(ctx, "--mode", "target", "--op", "show", "--tid", strconv.Itoa(id))
	select {
	case <-seen:
		return nil
	case <-p.exited:
		p.tr.forget(id)
		return fmt.Errorf("tgttest: sync: tgtd exited")
	case <-ctx.Done():
		p.tr.forget(id)
		return fmt.Errorf("tgttest: sync: %w", ctx.Err())
	}
}

// Commands returns how many commands with operation code op for LUN lun
// tgtd has seen so far, over all targets of this Server (tgt's log names
// the LUN, not the target: give each target its own Server when that
// matters). Call Sync first. It needs Config.Trace (Start sets it) and
// returns zero counts otherwise. Counts start again at zero after a
// Restart.
func (s *Server) Commands(lun int, op byte) CommandCount { return s.cur().tr.get(lun, op) }

// CommandLog returns every command seen so far, in the order tgtd queued
// them (since the last start or Restart). Call Sync first.
func (s *Server) CommandLog() []Command { return s.cur().tr.commands() }
