package initiator_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// refusingWith is a target that fails every login with class and detail.
func refusingWith(class, detail uint8) iscsitest.Handler {
	return func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		return tg.Login(req, iscsitest.LoginOptions{StatusClass: class, StatusDetail: detail})
	}
}

// closedPort is an address on which nothing listens: connections to it
// are refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestLoginRefused: a login that retrying cannot fix (status class 2 but
// too many connections and session does not exist; an authentication
// failure decided in the exchange) is LoginRefused, through Connect and
// DialNexus as a command logs in; a transient failure (class 3, a refused
// connection, a connection lost after the CHAP response) is not, and
// neither is a failure where one of the portals failed transiently.
func TestLoginRefused(t *testing.T) {
	chap := func(mutualSecret string) iscsitest.Handler {
		ct := &chapTarget{user: "alice", secret: "alicesecret12", mutualUser: "tgt", mutualSecret: mutualSecret,
			chapI: "3", chapC: chapTestChallenge}
		return ct.handler
	}
	closesAfterCHAPResponse := func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		kvs, _ := textkey.Parse(req.Data)
		if v, _ := textkey.Get(kvs, "CHAP_R"); req.BHS.Opcode() == pdu.OpLoginReq && v != "" {
			return []iscsitest.Reply{{Close: true}}
		}
		return chap("targetsecret")(tg, req)
	}
	noCreds := func(*initiator.SessionConfig) {}
	cases := []struct {
		name    string
		portals []iscsitest.Handler // nil: a closed port
		creds   func(*initiator.SessionConfig)
		refused bool
	}{
		{"02/00 initiator error", []iscsitest.Handler{refusingWith(2, 0)}, noCreds, true},
		{"02/01 authentication failure", []iscsitest.Handler{refusingWith(2, 1)}, noCreds, true},
		{"02/02 authorization failure", []iscsitest.Handler{refusingWith(2, 2)}, noCreds, true},
		{"02/03 target not found", []iscsitest.Handler{refusingWith(2, 3)}, noCreds, true},
		{"02/04 target removed", []iscsitest.Handler{refusingWith(2, 4)}, noCreds, true},
		{"02/05 unsupported version", []iscsitest.Handler{refusingWith(2, 5)}, noCreds, true},
		{"02/07 missing parameter", []iscsitest.Handler{refusingWith(2, 7)}, noCreds, true},
		{"02/06 too many connections", []iscsitest.Handler{refusingWith(2, 6)}, noCreds, false},
		{"02/0a session does not exist", []iscsitest.Handler{refusingWith(2, 0x0a)}, noCreds, false},
		{"03/00 target error", []iscsitest.Handler{refusingWith(3, 0)}, noCreds, false},
		{"03/01 service unavailable", []iscsitest.Handler{refusingWith(3, 1)}, noCreds, false},
		{"03/02 out of resources", []iscsitest.Handler{refusingWith(3, 2)}, noCreds, false},
		{"wrong CHAP secret", []iscsitest.Handler{chap("targetsecret")}, func(c *initiator.SessionConfig) {
			chapCreds(false)(c)
			c.CHAP.Secret = []byte("wrongsecret12")
		}, true},
		{"CHAP required, no credentials", []iscsitest.Handler{chap("targetsecret")}, noCreds, true},
		{"mutual CHAP: the target answers wrong", []iscsitest.Handler{chap("othersecret12")}, chapCreds(true), true},
		{"connection closed after the CHAP response", []iscsitest.Handler{closesAfterCHAPResponse}, chapCreds(false), false},
		{"connection refused", []iscsitest.Handler{nil}, noCreds, false},
		{"every portal refuses", []iscsitest.Handler{refusingWith(2, 1), refusingWith(2, 3)}, noCreds, true},
		{"one portal refuses, one is down", []iscsitest.Handler{refusingWith(2, 1), nil}, noCreds, false},
		{"one portal is down, one refuses", []iscsitest.Handler{nil, refusingWith(2, 1)}, noCreds, false},
		{"one portal refuses, one is unavailable", []iscsitest.Handler{refusingWith(2, 3), refusingWith(3, 1)}, noCreds, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var portals []string
			for _, h := range c.portals {
				if h == nil {
					portals = append(portals, closedPort(t))
					continue
				}
				addr, _ := iscsitest.Listen(t, h)
				portals = append(portals, addr)
			}
			cfg := initiator.NexusConfig{
				Portals: portals,
				Dial:    initiator.DialConfig{Transport: initiator.TransportTCP},
				Session: initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
					InitiatorName: "iqn.2026-11.test:init", TargetName: "iqn.2026-11.test:tgt"}, NOPInterval: -1, QueueDepth: 8},
				LoginTimeout: 2 * time.Second,
			}
			c.creds(&cfg.Session)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			nx, err := initiator.DialNexus(ctx, cfg)
			if err == nil {
				nx.Close()
				t.Fatal("the login succeeded")
			}
			t.Log(err)
			if got := initiator.LoginRefused(err); got != c.refused {
				t.Fatalf("LoginRefused = %v, want %v, for %v", got, c.refused, err)
			}
		})
	}
}
