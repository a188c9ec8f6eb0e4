package initiator

import "context"

// SetNexusConnect replaces the dial-and-login step of a Nexus (tests).
func SetNexusConnect(cfg *NexusConfig, f func(ctx context.Context, dc DialConfig, sc SessionConfig) (*Session, error)) {
	cfg.connect = f
}

// BacklogCap is the capacity of the Session's backlog of Submits waiting
// for a command entry.
func BacklogCap(s *Session) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cap(s.backlog)
}

// SetReaperScanHook makes m's Reaper run f as it starts its scan of the
// paths.
func SetReaperScanHook(m *Multipath, f func()) { m.scanHook = f }

// PathsChanged tells m that a path changed, as a login or a lost
// session does.
func PathsChanged(m *Multipath) { m.pathsChanged() }

// PathNexus is the current Nexus of m's path i (nil before its first
// login).
func PathNexus(m *Multipath, i int) *Nexus { return m.paths[i].nx.Load() }

// PartialReaps is how many Reaps a Multipath set missing a path lives.
const PartialReaps = partialReaps
