package main

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/metrics"
	"github.com/iser-attach/iser-attach/nbd"
	"github.com/iser-attach/iser-attach/volume"
)

// metricsListenFlag is --metrics-listen of attach and serve.
func metricsListenFlag() cli.Flag {
	return &cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics at http://ADDRESS/metrics: tcp:HOST:PORT or unix:PATH (as --listen)"}
}

// metricsEndpoint is a running --metrics-listen: the collector the
// volume is added to once it exists, and the HTTP server.
type metricsEndpoint struct {
	col *metrics.Collector
	srv *metrics.Server
}

// listenMetrics starts serving metrics on spec (the syntax of serve's
// --listen); nil when spec is empty. It starts before the login, so a
// bad address or a port in use fails the command at once.
func listenMetrics(spec string) (*metricsEndpoint, error) {
	if spec == "" {
		return nil, nil
	}
	col := metrics.NewCollector()
	reg, err := metrics.NewRegistry(col)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	ln, err := nbd.Listen(spec)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	m := &metricsEndpoint{col: col, srv: metrics.Serve(ln, reg)}
	ev := logger.Info()
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		ev = ev.Str("url", "http://"+a.String()+metrics.Path).Bool("loopback_only", a.IP.IsLoopback())
	} else {
		ev = ev.Str("socket", strings.TrimPrefix(spec, "unix:"))
	}
	ev.Msg("serving Prometheus metrics")
	return m, nil
}

// add exports a volume's I/O counters and its session's state.
func (m *metricsEndpoint) add(name string, l *lunConn, io *metrics.IO) {
	if m == nil {
		return
	}
	m.col.Add(metrics.Volume{Labels: metrics.Labels{Volume: name, Target: l.nx.TargetName(), LUN: l.Info().Number},
		IO: io, Session: nexusSession{l.nx}, Timeouts: nexusSession{l.nx}, Paths: metricsPaths(l)})
}

// Close stops the HTTP server.
func (m *metricsEndpoint) Close() {
	if m == nil {
		return
	}
	if err := m.srv.Close(); err != nil {
		logger.Warn().Err(err).Msg("metrics server")
	}
}

// multipathPaths reports a Multipath's paths to the metrics.
type multipathPaths struct{ m *initiator.Multipath }

// PathStatuses is each path's state and counters.
func (p multipathPaths) PathStatuses() []metrics.PathStatus {
	var out []metrics.PathStatus
	for _, s := range p.m.Paths() {
		out = append(out, metrics.PathStatus{Portal: s.Portal, Up: s.State == initiator.PathUp, IOs: s.IOs, Failovers: s.Failovers})
	}
	return out
}

// metricsPaths is l's path reporter, nil for a single path.
func metricsPaths(l *lunConn) metrics.PathReporter {
	if m, ok := l.nx.(*initiator.Multipath); ok {
		return multipathPaths{m}
	}
	return nil
}

// nexusSession reports a Nexus's state with the names list shows:
// attached (up), recovering, failed, closed; and its command timeouts.
type nexusSession struct{ nx nexusHandle }

// CommandTimeouts counts the commands that timed out, over all sessions.
func (n nexusSession) CommandTimeouts() uint64 { return n.nx.Status().CommandTimeouts }

// SessionStatus is the Nexus's state and recoveries.
func (n nexusSession) SessionStatus() metrics.SessionStatus {
	st := n.nx.Status()
	return metrics.SessionStatus{State: sessionStateName(st.State), Recoveries: st.Recoveries}
}

// sessionStateName is the state label of s: attached, recovering, failed
// or closed (metrics.SessionStates).
func sessionStateName(s initiator.NexusState) string {
	switch s {
	case initiator.NexusUp:
		return "attached"
	case initiator.NexusRecovering:
		return "recovering"
	case initiator.NexusFailed:
		return "failed"
	}
	return "closed"
}

// Stats answers the control socket's stats request.
func (a *attached) Stats() volume.Stats {
	return volume.Stats{Name: a.name, Device: a.dev.Path(), TimeNanos: time.Now().UnixNano(), IO: a.counting.Snapshot()}
}

// exportMetricsName is a serve process's one name, in its metrics' volume
// label, list and stats: the export name, else (the default export) the
// name attach would give the LUN.
func exportMetricsName(export string, l *lunConn) string {
	if export != "" {
		return export
	}
	return defaultVolumeName(l.nx.TargetName(), uint(l.Info().Number))
}

// An attached volume answers the control socket's stats requests.
var _ volume.StatsReporter = (*attached)(nil)

// checkListenSpec checks the form of a listener flag's value (unix:PATH or
// tcp:HOST:PORT; "" is none): a mistake is a usage error.
func checkListenSpec(c *cli.Context, flag, spec string) error {
	if spec == "" {
		return nil
	}
	if _, err := nbd.Loopback(spec); err != nil {
		return usageErrorf(c, "--%s: %v", flag, err)
	}
	return nil
}
