package initiator_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestLoginAuthMethodOffer: with credentials, a normal session offers CHAP
// only and fails against a target that picks None; a discovery session
// offers CHAP,None and goes on without authentication when the portal picks
// None, unless mutual CHAP asks the target to prove itself. The fake target
// answers AuthMethod=None to any offer.
func TestLoginAuthMethodOffer(t *testing.T) {
	oneWay := &initiator.CHAPCredentials{User: "u", Secret: []byte("secret123456")}
	mutual := &initiator.CHAPCredentials{User: "u", Secret: []byte("secret123456"), MutualUser: "t", MutualSecret: []byte("tsecret123456")}
	cases := []struct {
		name      string
		discovery bool
		creds     *initiator.CHAPCredentials
		offer     string
		ok        bool
	}{
		{"normal, no credentials", false, nil, "None", true},
		{"normal, CHAP", false, oneWay, "CHAP", false},
		{"normal, mutual CHAP", false, mutual, "CHAP", false},
		{"discovery, no credentials", true, nil, "None", true},
		{"discovery, CHAP", true, oneWay, "CHAP,None", true},
		{"discovery, mutual CHAP", true, mutual, "CHAP", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var offers []string
			h := func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
				if req.BHS.Opcode() == pdu.OpLoginReq {
					kvs, _ := textkey.Parse(req.Data)
					if v, ok := textkey.Get(kvs, "AuthMethod"); ok {
						mu.Lock()
						offers = append(offers, v)
						mu.Unlock()
					}
					return tg.Login(req, iscsitest.LoginOptions{})
				}
				return tg.Good(req)
			}
			_, _, err := loginTo(t, h, func(cfg *initiator.SessionConfig) {
				cfg.CHAP = c.creds
				if c.discovery {
					cfg.Discovery, cfg.TargetName = true, ""
				}
			})
			mu.Lock()
			defer mu.Unlock()
			if len(offers) != 1 || offers[0] != c.offer {
				t.Fatalf("AuthMethod offers %q, want [%s]", offers, c.offer)
			}
			if c.ok && err != nil {
				t.Fatalf("login: %v", err)
			}
			if !c.ok && (!errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "refused CHAP")) {
				t.Fatalf("login = %v, want CHAP refused", err)
			}
		})
	}
}

// TestLoginRefusalNamesInitiator: a login refused for authentication,
// authorization or an unknown target says which initiator name was
// refused, and for the last two how the target's ACL admits it (LIO
// answers an initiator its ACL lacks with 02/02, tgt with 02/03); other
// refusals do not.
func TestLoginRefusalNamesInitiator(t *testing.T) {
	const acl = "(LIO: targetcli /iscsi/iqn.2026-11.test:tgt/tpg1/acls create iqn.2026-11.test:init; " +
		"tgt: tgtadm --lld iscsi --mode target --op bind --tid TID --initiator-name iqn.2026-11.test:init)"
	for _, c := range []struct {
		detail uint8
		want   string // the whole message after "login rejected: "
	}{
		{1, "authentication failed (status class 0x02 detail 0x01); initiator name iqn.2026-11.test:init"},
		{2, "authorization failure (initiator not allowed to access this target) (status class 0x02 detail 0x02): " +
			"the target's ACL does not admit initiator iqn.2026-11.test:init; add it there " + acl},
		{3, "target not found (status class 0x02 detail 0x03): no target iqn.2026-11.test:tgt for initiator iqn.2026-11.test:init here: " +
			"check the name (iser-attach discover PORTAL) and that the target's ACL admits the initiator " + acl},
		{4, "target removed (status class 0x02 detail 0x04)"},
	} {
		_, _, err := loginTo(t, func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			return tg.Login(req, iscsitest.LoginOptions{StatusClass: 2, StatusDetail: c.detail})
		}, nil)
		var le *initiator.LoginError
		if !errors.As(err, &le) || le.Detail != c.detail {
			t.Fatalf("detail %d: err = %v", c.detail, err)
		}
		if got, want := err.Error(), "login rejected: "+c.want; got != want {
			t.Errorf("detail %d:\n got %s\nwant %s", c.detail, got, want)
		}
	}
}

// TestTgtdNormalLoginKeepsCHAP: credentials given for a target that does
// not ask for CHAP fail the login rather than log in without it.
func TestTgtdNormalLoginKeepsCHAP(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:open"})
	_, err := tgtLogin(t, srv, "iqn.2026-11.test:open", func(cfg *initiator.SessionConfig) {
		cfg.CHAP = &initiator.CHAPCredentials{User: "alice", Secret: []byte("alicesecret12")}
	})
	if !errors.Is(err, initiator.ErrAuthFailed) {
		t.Fatalf("login with CHAP to a target without CHAP: %v", err)
	}
	if _, err := tgtLogin(t, srv, "iqn.2026-11.test:open", nil); err != nil {
		t.Fatalf("login without credentials: %v", err)
	}
}
