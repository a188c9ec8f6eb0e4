package discovery

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

func discoverTgtd(t *testing.T, srv *tgttest.Server, creds *initiator.CHAPCredentials) ([]Target, error) {
	t.Helper()
	got, _, err := discoverTgtdLog(t, srv, creds)
	return got, err
}

// discoverTgtdLog is discoverTgtd, which also returns the log.
func discoverTgtdLog(t *testing.T, srv *tgttest.Server, creds *initiator.CHAPCredentials) ([]Target, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var log bytes.Buffer
	got, err := SendTargets(ctx, Config{Portal: srv.Portal(), InitiatorName: "iqn.2026-11.io.iser-attach:disc-test",
		CHAP: creds, Logger: zerolog.New(&log)})
	return got, log.String(), err
}

// TestSendTargetsFallbackTgtd: on a tgtd whose discovery needs no
// credentials, one-way CHAP credentials discover at once (tgt picks None
// from CHAP,None), and mutual ones (CHAP offered alone, which tgt refuses)
// after the retry without authentication, with its warning.
func TestSendTargetsFallbackTgtd(t *testing.T) {
	const iqn = "iqn.2026-11.test:disc"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn})
	const warning = "refused our CHAP credentials; retried without authentication, which the portal accepted"
	for _, c := range []struct {
		name  string
		creds *initiator.CHAPCredentials
		warn  bool
	}{
		{"one-way", &initiator.CHAPCredentials{User: "disc", Secret: []byte("discsecret123")}, false},
		{"mutual", &initiator.CHAPCredentials{User: "disc", Secret: []byte("discsecret123"),
			MutualUser: "tgt", MutualSecret: []byte("targetsecret9")}, true},
	} {
		got, log, err := discoverTgtdLog(t, srv, c.creds)
		if err != nil || len(got) != 1 || got[0].Name != iqn {
			t.Fatalf("%s: discovered %+v, err %v\n%s", c.name, got, err, log)
		}
		if warned := strings.Contains(log, `"level":"warn"`) && strings.Contains(log, warning); warned != c.warn {
			t.Errorf("%s: warned %v, want %v:\n%s", c.name, warned, c.warn, log)
		}
	}
}

// TestSendTargetsCHAPTgtd: one set of credentials discovers on a tgtd that
// does not authenticate discovery (it picks None from CHAP,None) and on one
// that does (an account bound without --tid: tgt's discovery account).
func TestSendTargetsCHAPTgtd(t *testing.T) {
	const iqn = "iqn.2026-11.test:disc"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn})
	good := &initiator.CHAPCredentials{User: "disc", Secret: []byte("discsecret123")}
	wrong := &initiator.CHAPCredentials{User: "disc", Secret: []byte("wrongsecret12")}
	found := func(step string, creds *initiator.CHAPCredentials) {
		t.Helper()
		got, err := discoverTgtd(t, srv, creds)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if len(got) != 1 || got[0].Name != iqn {
			t.Fatalf("%s: discovered %+v", step, got)
		}
	}
	refused := func(step string, creds *initiator.CHAPCredentials) {
		t.Helper()
		if got, err := discoverTgtd(t, srv, creds); !errors.Is(err, initiator.ErrAuthFailed) {
			t.Fatalf("%s: discovered %+v, err %v; want authentication failed", step, got, err)
		}
	}

	found("open portal, no credentials", nil)
	found("open portal, CHAP credentials", good)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := srv.Tgtadm(ctx, "--mode", "account", "--op", "new", "--user", "disc", "--password", "discsecret123"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Tgtadm(ctx, "--mode", "account", "--op", "bind", "--user", "disc"); err != nil {
		t.Fatal(err)
	}
	found("CHAP portal, CHAP credentials", good)
	refused("CHAP portal, no credentials", nil)
	refused("CHAP portal, wrong secret", wrong)
}
