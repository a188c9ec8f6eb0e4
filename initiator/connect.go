package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Connect dials a portal and logs in. When the target refuses the CHAP
// algorithm list, it dials again once and offers MD5 alone (RFC 7143 makes
// MD5 the one algorithm every target has); when a response under the
// ambiguous CHAP_A=7 is refused, it retries without 7. A retry that ends
// without an answer (a timeout, a lost connection) reports the refusal.
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
		dc.Logger.Debug().Str("portal", dc.Addr).Str("offer", creds.offerA()).Err(ae).
			Msg("target refused the CHAP algorithm; retrying")
		first := err
		s, err = connectOnce(ctx, dc, sc)
		var le *LoginError
		if err != nil && !errors.As(err, &le) && !errors.Is(err, ErrAuthFailed) {
			// The retry learnt nothing (LIO over iSER may leave a login
			// unanswered right after refusing one): the refusal is the
			// answer.
			return nil, fmt.Errorf("%w; retrying with CHAP_A=%s: %v", first, creds.offerA(), err)
		}
	}
	return s, err
}

func connectOnce(ctx context.Context, dc DialConfig, sc SessionConfig) (*Session, error) {
	start := time.Now()
	dctx := ctx
	if dc.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, dc.ConnectTimeout)
		defer cancel()
	}
	dm, err := DialDatamover(dctx, dc)
	if err != nil {
		if dctx.Err() == context.DeadlineExceeded {
			return nil, &LoginTimeoutError{Addr: dc.Addr, Timeout: allowed(dctx, start), Connecting: true}
		}
		return nil, err
	}
	s, err := NewSession(ctx, dm, sc)
	switch {
	case err == nil:
		return s, nil
	case ctx.Err() == context.DeadlineExceeded:
		err = &LoginTimeoutError{Addr: dc.Addr, Timeout: allowed(ctx, start), AfterCHAP: errors.Is(err, errCHAPUnanswered)}
	case errors.Is(err, ErrAuthFailed) && sc.CHAP == nil:
		err = fmt.Errorf("%w; the target requires CHAP and no credentials were given: "+
			"pass --chap-user and --chap-secret-file (chap_user and chap_secret_file in a volume file)", err)
	}
	return nil, fmt.Errorf("login to %s at %s: %w", targetLabel(&sc.LoginConfig), dc.Addr, err)
}

// LoginTimeoutError is a portal that did not answer within the login
// timeout: the TCP or RDMA connection was not accepted (Connecting), or
// it was and no login response came. It matches context.DeadlineExceeded.
type LoginTimeoutError struct {
	Addr       string
	Timeout    time.Duration
	Connecting bool
	// AfterCHAP is set when the response that never came was the answer
	// to our CHAP response: most likely a refused secret.
	AfterCHAP bool
}

func (e *LoginTimeoutError) Error() string {
	if e.Connecting {
		return fmt.Sprintf("no answer from %s within %s (connecting)", e.Addr, e.Timeout)
	}
	if e.AfterCHAP {
		return fmt.Sprintf("no answer to the CHAP response from %s within %s: the target may have refused the CHAP credentials", e.Addr, e.Timeout)
	}
	return fmt.Sprintf("no login response from %s within %s", e.Addr, e.Timeout)
}

// Unwrap returns context.DeadlineExceeded.
func (e *LoginTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// loginTimeoutKey holds, in a LoginContext, a loginTimeout.
type loginTimeoutKey struct{}

// loginTimeout is the timeout a LoginContext was given and the deadline
// it set: a context under it whose deadline is another (a parent's that
// comes sooner, a child's) is not bounded by it.
type loginTimeout struct {
	timeout  time.Duration
	deadline time.Time
}

// LoginContext is ctx with a deadline timeout from now for a dial and
// login: a LoginTimeoutError from Connect under it names timeout as given,
// while that deadline is the one that bounds the login (a dial's shorter
// ConnectTimeout, or a sooner parent deadline, is named as the time left).
// Under a plain deadline the error names the time left when Connect
// started, rounded, which a loaded machine can make read 490ms for 500.
func LoginContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	own := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, own)
	if dl, _ := ctx.Deadline(); !dl.Equal(own) {
		return ctx, cancel // a parent's deadline comes sooner and bounds it
	}
	return context.WithValue(ctx, loginTimeoutKey{}, loginTimeout{timeout, own}), cancel
}

// allowed is the time ctx gave from start, rounded for a message.
func allowed(ctx context.Context, start time.Time) time.Duration {
	dl, ok := ctx.Deadline()
	if lt, set := ctx.Value(loginTimeoutKey{}).(loginTimeout); set && ok && dl.Equal(lt.deadline) {
		return lt.timeout
	}
	if !ok {
		return time.Since(start).Round(time.Millisecond)
	}
	// The deadline was set a moment before start was read (more under
	// load): round so that a timeout of 500ms reads 500ms, not 499ms.
	d := dl.Sub(start)
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(10 * time.Millisecond)
}

func targetLabel(c *LoginConfig) string {
	if c.Discovery {
		return "discovery session"
	}
	return c.TargetName
}
