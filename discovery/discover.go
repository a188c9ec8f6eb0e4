package discovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// Config says where and as whom to discover.
type Config struct {
	// Portal is host:port of the discovery portal.
	Portal        string
	InitiatorName string
	CHAP          *initiator.CHAPCredentials
	Logger        zerolog.Logger
}

// SendTargets logs in a discovery session on cfg.Portal and returns every
// target it reports (SendTargets=All).
//
// With credentials, a login refused for authentication is tried once more
// offering AuthMethod=None, and a warning says so when that works: the
// credentials a user gives for a target's normal session (which keeps
// strict CHAP) must not stop discovery on a portal whose discovery needs
// none, yet LIO (enforce_discovery_auth 0) picks CHAP from CHAP,None and
// then fails it for want of discovery credentials, and with mutual CHAP
// (offered alone) LIO and tgt refuse it. A discovery list is no secret.
// When the retry fails too, the first refusal is the error.
func SendTargets(ctx context.Context, cfg Config) ([]Target, error) {
	s, err := discoverySession(ctx, cfg, cfg.CHAP)
	if err != nil && cfg.CHAP != nil && errors.Is(err, initiator.ErrAuthFailed) {
		var rerr error
		if s, rerr = discoverySession(ctx, cfg, nil); rerr == nil {
			cfg.Logger.Warn().Str("portal", cfg.Portal).Err(err).
				Msgf("discovery on %s refused our CHAP credentials; retried without authentication, which the portal accepted", cfg.Portal)
			err = nil
		} else {
			cfg.Logger.Debug().Str("portal", cfg.Portal).Err(rerr).Msg("discovery without authentication refused too")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	kvs, err := s.Text(ctx, []textkey.KV{{Key: "SendTargets", Value: "All"}})
	cerr := s.Close()
	if err != nil {
		return nil, fmt.Errorf("discovery on %s: %w", cfg.Portal, err)
	}
	if cerr != nil {
		cfg.Logger.Debug().Err(cerr).Msg("discovery logout")
	}
	targets, err := ParseSendTargets(kvs)
	if err != nil {
		return nil, fmt.Errorf("discovery on %s: %w", cfg.Portal, err)
	}
	return targets, nil
}

// discoverySession logs in a discovery session with creds (none: nil).
func discoverySession(ctx context.Context, cfg Config, creds *initiator.CHAPCredentials) (*initiator.Session, error) {
	return initiator.Connect(ctx, initiator.DialConfig{Transport: initiator.TransportTCP, Addr: cfg.Portal, Logger: cfg.Logger},
		initiator.SessionConfig{
			LoginConfig: initiator.LoginConfig{
				InitiatorName: cfg.InitiatorName,
				Discovery:     true,
				ISID:          initiator.NewISID(),
				CHAP:          creds,
				Want:          initiator.DefaultWant(),
			},
			QueueDepth:  1,
			NOPInterval: -1,
			Logger:      cfg.Logger,
		})
}
