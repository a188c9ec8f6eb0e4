package discovery

import (
	"context"
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
func SendTargets(ctx context.Context, cfg Config) ([]Target, error) {
	s, err := initiator.Connect(ctx, initiator.DialConfig{Transport: initiator.TransportTCP, Addr: cfg.Portal, Logger: cfg.Logger},
		initiator.SessionConfig{
			LoginConfig: initiator.LoginConfig{
				InitiatorName: cfg.InitiatorName,
				Discovery:     true,
				ISID:          initiator.NewISID(),
				CHAP:          cfg.CHAP,
				Want:          initiator.DefaultWant(),
			},
			QueueDepth:  1,
			NOPInterval: -1,
			Logger:      cfg.Logger,
		})
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
