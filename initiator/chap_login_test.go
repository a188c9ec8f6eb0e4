package initiator_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// Logins against a scripted CHAP target (MD5): hostile challenges must be
// refused before we answer them.

// chapTarget scripts the security stage of a CHAP target. It checks the
// initiator's response and, for mutual CHAP, answers the initiator's
// challenge with its own secret.
type chapTarget struct {
	user, secret             string
	mutualUser, mutualSecret string
	chapI                    string // the target's CHAP_I

	mu        sync.Mutex
	chapC     string   // the target's CHAP_C
	ourC      []string // the initiator's CHAP_C, one per mutual login
	responses int      // CHAP_R values received
}

func (ct *chapTarget) handler(t *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
	if req.BHS.Opcode() != pdu.OpLoginReq {
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
	var out []textkey.KV
	switch {
	case get("AuthMethod") != "":
		out = []textkey.KV{{Key: "AuthMethod", Value: "CHAP"}}
	case get("CHAP_A") != "":
		out = []textkey.KV{{Key: "CHAP_A", Value: "5"}, {Key: "CHAP_I", Value: ct.chapI}, {Key: "CHAP_C", Value: ct.challenge()}}
	case get("CHAP_R") != "":
		ct.mu.Lock()
		ct.responses++
		ct.mu.Unlock()
		id, _ := strconv.Atoi(ct.chapI)
		chl, _ := initiator.ParseCHAPBinary(ct.challenge())
		want, _ := initiator.CHAPResponse(initiator.CHAPMD5, byte(id), []byte(ct.secret), chl)
		if get("CHAP_N") != ct.user || get("CHAP_R") != initiator.FormatCHAPBinary(want) {
			return loginStatusReply(rep, 2, 1)
		}
		if c := get("CHAP_C"); c != "" {
			ct.mu.Lock()
			ct.ourC = append(ct.ourC, c)
			ct.mu.Unlock()
			mid, err := strconv.Atoi(get("CHAP_I"))
			mchl, err2 := initiator.ParseCHAPBinary(c)
			if err != nil || err2 != nil {
				return loginStatusReply(rep, 2, 0)
			}
			r, _ := initiator.CHAPResponse(initiator.CHAPMD5, byte(mid), []byte(ct.mutualSecret), mchl)
			out = []textkey.KV{{Key: "CHAP_N", Value: ct.mutualUser}, {Key: "CHAP_R", Value: initiator.FormatCHAPBinary(r)}}
		}
	default:
		return loginStatusReply(rep, 2, 0)
	}
	return withData(rep, out)
}

func (ct *chapTarget) challenge() string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return ct.chapC
}

func (ct *chapTarget) setChallenge(c string) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.chapC = c
}

// seen returns the CHAP_R count and the initiator's challenges so far.
func (ct *chapTarget) seen() (responses int, ourC []string) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return ct.responses, append([]string(nil), ct.ourC...)
}

// withData replaces the keys of a login reply built by Target.Login.
func withData(rep []iscsitest.Reply, kvs []textkey.KV) []iscsitest.Reply {
	var resp pdu.LoginResponse
	_ = resp.Unmarshal(&rep[0].PDU.BHS)
	return []iscsitest.Reply{{PDU: pdu.NewPDU(&resp, textkey.Encode(kvs))}}
}

// loginStatusReply turns a login reply into a failure with the given status.
func loginStatusReply(rep []iscsitest.Reply, class, detail uint8) []iscsitest.Reply {
	var resp pdu.LoginResponse
	_ = resp.Unmarshal(&rep[0].PDU.BHS)
	resp.Transit, resp.StatusClass, resp.StatusDetail = false, class, detail
	return []iscsitest.Reply{{PDU: pdu.NewPDU(&resp, nil), Close: true}}
}

var chapTestChallenge = "0x" + strings.Repeat("5a", 16)

func chapCreds(mutual bool) func(*initiator.SessionConfig) {
	return func(cfg *initiator.SessionConfig) {
		cfg.CHAP = &initiator.CHAPCredentials{User: "alice", Secret: []byte("alicesecret12"),
			Algorithms: []initiator.CHAPAlgorithm{initiator.CHAPMD5}}
		if mutual {
			cfg.CHAP.MutualUser, cfg.CHAP.MutualSecret = "tgt", []byte("targetsecret")
		}
	}
}

func TestCHAPLoginScripted(t *testing.T) {
	for _, mutual := range []bool{false, true} {
		ct := &chapTarget{user: "alice", secret: "alicesecret12", mutualUser: "tgt", mutualSecret: "targetsecret",
			chapI: "200", chapC: chapTestChallenge}
		if _, _, err := loginTo(t, ct.handler, chapCreds(mutual)); err != nil {
			t.Fatalf("mutual %v: %v", mutual, err)
		}
		if n, ourC := ct.seen(); n != 1 || len(ourC) != map[bool]int{false: 0, true: 1}[mutual] {
			t.Fatalf("mutual %v: %d responses, %d challenges", mutual, n, len(ourC))
		}
	}
}

// A rogue target takes the challenge we sent on one connection and offers
// it as its own on a second one: we must not answer it (RFC 7143 section
// 9.2.1), in whichever session or goroutine the second login runs.
func TestCHAPLoginRefusesReflectedChallenge(t *testing.T) {
	ct := &chapTarget{user: "alice", secret: "alicesecret12", mutualUser: "tgt", mutualSecret: "not-the-mutual-secret",
		chapI: "7", chapC: chapTestChallenge}
	// Connection 1: the rogue target learns our challenge (and fails our
	// mutual check, not knowing the target secret).
	_, _, err := loginTo(t, ct.handler, chapCreds(true))
	_, ourC := ct.seen()
	if !errors.Is(err, initiator.ErrAuthFailed) || len(ourC) != 1 {
		t.Fatalf("first login: %v, %d challenges seen", err, len(ourC))
	}
	ct.setChallenge(ourC[0])
	// Connection 2 (in another goroutine): our challenge comes back.
	errc := make(chan error)
	go func() {
		_, _, err := loginTo(t, ct.handler, chapCreds(true))
		errc <- err
	}()
	err = <-errc
	if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "reflection") {
		t.Fatalf("reflected challenge: %v", err)
	}
	if n, _ := ct.seen(); n != 1 {
		t.Fatalf("we answered the reflected challenge (%d CHAP_R sent)", n)
	}
}

func TestCHAPLoginRefusesBadTargetValues(t *testing.T) {
	for _, tc := range []struct{ name, chapI, chapC, want string }{
		{"hex CHAP_I", "0x10", chapTestChallenge, "CHAP_I"},
		{"CHAP_I 256", "256", chapTestChallenge, "CHAP_I"},
		{"negative CHAP_I", "-1", chapTestChallenge, "CHAP_I"},
		{"short challenge", "1", "0x" + strings.Repeat("5a", 8), "8 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := &chapTarget{user: "alice", secret: "alicesecret12", chapI: tc.chapI, chapC: tc.chapC}
			_, _, err := loginTo(t, ct.handler, chapCreds(false))
			if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("login: %v", err)
			}
			if n, _ := ct.seen(); n != 0 {
				t.Fatal("we answered the target's challenge")
			}
		})
	}
}

func TestCHAPLoginRefusesSameSecretBothWays(t *testing.T) {
	ct := &chapTarget{user: "alice", secret: "alicesecret12", mutualUser: "tgt", mutualSecret: "alicesecret12",
		chapI: "1", chapC: chapTestChallenge}
	_, tgt, err := loginTo(t, ct.handler, func(cfg *initiator.SessionConfig) {
		chapCreds(true)(cfg)
		cfg.CHAP.MutualSecret = cfg.CHAP.Secret
	})
	if err == nil || !strings.Contains(err.Error(), "same as the CHAP secret") {
		t.Fatalf("login: %v", err)
	}
	if n := len(tgt.Seen()); n != 0 {
		t.Fatalf("the target saw %d requests; the login must fail before sending any", n)
	}
}

// A target that answers our challenge with our own secret is refused as
// such (RFC 7143 section 9.2.1), not merely as a wrong answer.
func TestCHAPLoginRefusesTargetUsingOurSecret(t *testing.T) {
	ct := &chapTarget{user: "alice", secret: "alicesecret12", mutualUser: "tgt", mutualSecret: "alicesecret12",
		chapI: "9", chapC: chapTestChallenge}
	_, _, err := loginTo(t, ct.handler, chapCreds(true))
	if !errors.Is(err, initiator.ErrAuthFailed) || !strings.Contains(err.Error(), "our own CHAP secret") {
		t.Fatalf("login: %v", err)
	}
}

// TestConnectCHAPResponseUnanswered: a target that goes silent after our
// CHAP response (LIO over iSER, refusing a secret, may drop the reject and
// even the teardown) times out with an error that names the CHAP response
// and its likely cause, still matching context.DeadlineExceeded.
func TestConnectCHAPResponseUnanswered(t *testing.T) {
	ct := &chapTarget{user: "alice", secret: "alicesecret12", chapI: "7", chapC: chapTestChallenge}
	h := func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		kvs, _ := textkey.Parse(req.Data)
		if v, _ := textkey.Get(kvs, "CHAP_R"); req.BHS.Opcode() == pdu.OpLoginReq && v != "" {
			return nil
		}
		return ct.handler(tg, req)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			iscsitest.Serve(t, c, h)
		}
	}()
	cfg := initiator.SessionConfig{LoginConfig: initiator.LoginConfig{InitiatorName: "iqn.2026-11.test:i", TargetName: "iqn.2026-11.test:t"}}
	chapCreds(false)(&cfg)
	ctx, cancel := initiator.LoginContext(context.Background(), 500*time.Millisecond)
	defer cancel()
	addr := ln.Addr().String()
	_, err = initiator.Connect(ctx, initiator.DialConfig{Transport: initiator.TransportTCP, Addr: addr}, cfg)
	var te *initiator.LoginTimeoutError
	if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want a LoginTimeoutError", err)
	}
	want := "no answer to the CHAP response from " + addr + " within 500ms: the target may have refused the CHAP credentials"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q", err, want)
	}
	if n, _ := ct.seen(); n != 0 {
		t.Errorf("the handler saw %d CHAP responses, want 0 (silenced)", n)
	}
}

// TestConnectCHAPRetryUnansweredReportsRefusal: a response under CHAP_A=7
// (SHA-256) refused makes Connect retry without 7 (tgt took 7 for SHA-1);
// when that second login is never answered (LIO over iSER, right after
// refusing the first), the error is the refusal, an authentication
// failure, not a login timeout.
func TestConnectCHAPRetryUnansweredReportsRefusal(t *testing.T) {
	refusing := func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
		if req.BHS.Opcode() != pdu.OpLoginReq {
			return tg.Good(req)
		}
		rep := tg.Login(req, iscsitest.LoginOptions{})
		kvs, _ := textkey.Parse(req.Data)
		get := func(k string) string { v, _ := textkey.Get(kvs, k); return v }
		switch {
		case get("AuthMethod") != "":
			return withData(rep, []textkey.KV{{Key: "AuthMethod", Value: "CHAP"}})
		case get("CHAP_A") != "":
			return withData(rep, []textkey.KV{{Key: "CHAP_A", Value: "7"}, {Key: "CHAP_I", Value: "9"}, {Key: "CHAP_C", Value: chapTestChallenge}})
		}
		return loginStatusReply(rep, 2, 1)
	}
	silent := func(*iscsitest.Target, *pdu.PDU) []iscsitest.Reply { return nil }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for _, h := range []iscsitest.Handler{refusing, silent} {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			iscsitest.Serve(t, c, h)
		}
	}()
	cfg := initiator.SessionConfig{LoginConfig: initiator.LoginConfig{InitiatorName: "iqn.2026-11.test:i", TargetName: "iqn.2026-11.test:t",
		CHAP: &initiator.CHAPCredentials{User: "alice", Secret: []byte("alicesecret12"),
			Algorithms: []initiator.CHAPAlgorithm{initiator.CHAPSHA256, initiator.CHAPMD5}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = initiator.Connect(ctx, initiator.DialConfig{Transport: initiator.TransportTCP, Addr: ln.Addr().String()}, cfg)
	if !errors.Is(err, initiator.ErrAuthFailed) {
		t.Fatalf("error %v, want the refusal (ErrAuthFailed)", err)
	}
	for _, want := range []string{"authentication failed", "retrying with CHAP_A=5"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
