package initiator

import "context"

// SetNexusConnect replaces the dial-and-login step of a Nexus (tests).
func SetNexusConnect(cfg *NexusConfig, f func(ctx context.Context, dc DialConfig, sc SessionConfig) (*Session, error)) {
	cfg.connect = f
}
