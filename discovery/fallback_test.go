package discovery

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// lioDiscovery scripts LIO's discovery portal with enforce_discovery_auth
// 0 and no discovery credentials: offered CHAP (alone or in CHAP,None) it
// picks CHAP, then fails the response for authentication (02/01); offered
// None it lets the initiator in. With requireAuth it refuses None too (a
// portal whose discovery does need CHAP).
type lioDiscovery struct {
	requireAuth bool

	mu     sync.Mutex
	offers []string // AuthMethod offers, one per login
}

func (ld *lioDiscovery) handler(t *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
	switch req.BHS.Opcode() {
	case pdu.OpLoginReq:
	case pdu.OpTextReq:
		t.Ack(req)
		var tr pdu.TextRequest
		_ = tr.Unmarshal(&req.BHS)
		r := pdu.TextResponse{Final: true, ITT: tr.ITT, TTT: 0xffffffff, TargetSNs: t.SNs(true)}
		return []iscsitest.Reply{{PDU: pdu.NewPDU(&r, textkey.Encode([]textkey.KV{
			{Key: "TargetName", Value: "iqn.2026-11.test:lio"}, {Key: "TargetAddress", Value: "10.0.0.1:3260,1"}}))}}
	default:
		return t.Good(req)
	}
	var lr pdu.LoginRequest
	_ = lr.Unmarshal(&req.BHS)
	rep := t.Login(req, iscsitest.LoginOptions{})
	if lr.CSG != pdu.StageSecurity {
		return rep
	}
	kvs, _ := textkey.Parse(req.Data)
	get := func(k string) string { v, _ := textkey.Get(kvs, k); return v }
	reply := func(transit bool, class, detail uint8, out []textkey.KV) []iscsitest.Reply {
		var resp pdu.LoginResponse
		_ = resp.Unmarshal(&rep[0].PDU.BHS)
		resp.Transit, resp.StatusClass, resp.StatusDetail = transit, class, detail
		return []iscsitest.Reply{{PDU: pdu.NewPDU(&resp, textkey.Encode(out)), Close: class != 0}}
	}
	switch am := get("AuthMethod"); {
	case am != "":
		ld.mu.Lock()
		ld.offers = append(ld.offers, am)
		ld.mu.Unlock()
		if strings.Contains(am, "CHAP") {
			return reply(false, 0, 0, []textkey.KV{{Key: "AuthMethod", Value: "CHAP"}})
		}
		if ld.requireAuth {
			return reply(false, 2, 1, nil)
		}
		return rep // AuthMethod=None
	case get("CHAP_A") != "":
		return reply(false, 0, 0, []textkey.KV{{Key: "CHAP_A", Value: "5"}, {Key: "CHAP_I", Value: "7"},
			{Key: "CHAP_C", Value: "0x" + strings.Repeat("5a", 16)}})
	case get("CHAP_R") != "":
		return reply(false, 2, 1, nil) // no discovery credentials to check it against
	}
	return reply(false, 2, 0, nil)
}

// servePortal serves h on a TCP portal until the returned stop is called.
func servePortal(t *testing.T, h iscsitest.Handler) (string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			iscsitest.Serve(t, c, h)
		}
	}()
	return l.Addr().String(), func() { l.Close(); <-done }
}

// TestSendTargetsRetriesWithoutAuth: with LIO's behaviour (it picks CHAP,
// then fails it), discovery with one-way or mutual credentials logs in
// once more offering None, says so in a warning, and lists the targets;
// on a portal that needs CHAP the first refusal is the error.
func TestSendTargetsRetriesWithoutAuth(t *testing.T) {
	oneWay := &initiator.CHAPCredentials{User: "u", Secret: []byte("usersecret123")}
	mutual := &initiator.CHAPCredentials{User: "u", Secret: []byte("usersecret123"),
		MutualUser: "t", MutualSecret: []byte("targetsecret9")}
	for _, c := range []struct {
		name        string
		creds       *initiator.CHAPCredentials
		requireAuth bool
		offers      []string
	}{
		{"one-way", oneWay, false, []string{"CHAP,None", "None"}},
		{"mutual", mutual, false, []string{"CHAP", "None"}},
		{"one-way, portal needs CHAP", oneWay, true, []string{"CHAP,None", "None"}},
		{"no credentials", nil, false, []string{"None"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ld := &lioDiscovery{requireAuth: c.requireAuth}
			portal, stop := servePortal(t, ld.handler)
			defer stop()
			var log bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := SendTargets(ctx, Config{Portal: portal, InitiatorName: "iqn.2026-11.test:init", CHAP: c.creds,
				Logger: zerolog.New(&log)})
			ld.mu.Lock()
			offers := strings.Join(ld.offers, " ")
			ld.mu.Unlock()
			if offers != strings.Join(c.offers, " ") {
				t.Errorf("AuthMethod offers %q, want %q", offers, c.offers)
			}
			warned := strings.Contains(log.String(), `"level":"warn"`) && strings.Contains(log.String(),
				"discovery on "+portal+" refused our CHAP credentials; retried without authentication, which the portal accepted")
			if c.requireAuth {
				if !errors.Is(err, initiator.ErrAuthFailed) || warned {
					t.Fatalf("discovered %+v, err %v, warned %v; want the CHAP refusal", got, err, warned)
				}
				if !strings.Contains(err.Error(), "detail 0x01") {
					t.Errorf("err %v is not the first refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("discovery: %v\n%s", err, log.String())
			}
			if len(got) != 1 || got[0].Name != "iqn.2026-11.test:lio" {
				t.Fatalf("discovered %+v", got)
			}
			if want := c.creds != nil; warned != want {
				t.Errorf("warned %v, want %v:\n%s", warned, want, log.String())
			}
		})
	}
}
