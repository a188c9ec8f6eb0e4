package initiator

import (
	"context"
	"errors"
	"fmt"
)

// Connect dials a portal and logs in. When the target refuses the CHAP
// algorithm list, it dials again once and offers MD5 alone (RFC 7143 makes
// MD5 the one algorithm every target has); when a response under the
// ambiguous CHAP_A=7 is refused, it retries without 7.
func Connect(ctx context.Context, dc DialConfig, sc SessionConfig) (*Session, error) {
	if dc.QueueDepth == 0 {
		dc.QueueDepth = sc.QueueDepth
	}
	s, err := connectOnce(ctx, dc, sc)
	var ae *CHAPAlgorithmError
	if errors.As(err, &ae) && sc.CHAP != nil {
		creds := *sc.CHAP
		creds.Algorithms = []CHAPAlgorithm{CHAPMD5}
		if ae.Chosen != 0 {
			creds.Algorithms = nil
			for _, a := range sc.CHAP.algorithms() {
				if a != ae.Chosen {
					creds.Algorithms = append(creds.Algorithms, a)
				}
			}
		}
		sc.CHAP = &creds
		dc.Logger.Info().Str("portal", dc.Addr).Str("offer", creds.offerA()).Err(ae).
			Msg("target refused the CHAP algorithm; retrying")
		s, err = connectOnce(ctx, dc, sc)
	}
	return s, err
}

func connectOnce(ctx context.Context, dc DialConfig, sc SessionConfig) (*Session, error) {
	dm, err := DialDatamover(ctx, dc)
	if err != nil {
		return nil, err
	}
	s, err := NewSession(ctx, dm, sc)
	if err != nil {
		return nil, fmt.Errorf("login to %s at %s: %w", targetLabel(&sc.LoginConfig), dc.Addr, err)
	}
	return s, nil
}

func targetLabel(c *LoginConfig) string {
	if c.Discovery {
		return "discovery session"
	}
	return c.TargetName
}
