package discovery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

func discoverTgtd(t *testing.T, srv *tgttest.Server, creds *initiator.CHAPCredentials) ([]Target, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return SendTargets(ctx, Config{Portal: srv.Portal(), InitiatorName: "iqn.2026-11.io.iser-attach:disc-test",
		CHAP: creds, Logger: zerolog.Nop()})
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
