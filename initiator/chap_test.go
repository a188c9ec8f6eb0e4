package initiator

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
)

// Known answers computed with md5sum, sha1sum, sha256sum and openssl over
// id 7, secret "secretsecret", challenge 01..10.
func TestCHAPResponseKnownAnswers(t *testing.T) {
	chl := make([]byte, 16)
	for i := range chl {
		chl[i] = byte(i + 1)
	}
	want := map[CHAPAlgorithm]string{
		CHAPMD5:     "fd1043ba0b3ceab4dd514b0ebcc793fb",
		CHAPSHA1:    "3ef15fc74acf3ced6988cb56a1684a376128dbfa",
		CHAPSHA256:  "8553021b97266d305e570a913f8aa73b55e5cca0a29ccd2b706be51736076540",
		CHAPSHA3256: "973e8a49ad06e51937d074970786850b5c2cd75986c388d5cffe86fbec1d72c5",
	}
	for alg, w := range want {
		got, err := CHAPResponse(alg, 7, []byte("secretsecret"), chl)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(got) != w {
			t.Errorf("%s: %x, want %s", alg, got, w)
		}
	}
	if _, err := CHAPResponse(9, 7, nil, nil); err == nil {
		t.Error("algorithm 9 accepted")
	}
}

func TestCHAPBinary(t *testing.T) {
	for in, want := range map[string]string{"0x0102ff": "0102ff", "0X0102FF": "0102ff", "0x102": "0102", "0bAQL/": "0102ff"} {
		b, err := ParseCHAPBinary(in)
		if err != nil || hex.EncodeToString(b) != want {
			t.Errorf("%q: %x %v", in, b, err)
		}
	}
	for _, bad := range []string{"", "0x", "1234", "0xzz", "0b!!"} {
		if _, err := ParseCHAPBinary(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCHAPExchange(t *testing.T) {
	x := &chapExchange{creds: &CHAPCredentials{User: "u", Secret: []byte("s3cr3ts3cr3t"),
		MutualUser: "tgt", MutualSecret: []byte("mutualsecret")}}
	if _, err := x.answer("99", "1", "0x0102"); err == nil || !strings.Contains(err.Error(), "not offered") {
		t.Fatalf("unoffered algorithm: %v", err)
	}
	for _, a := range []string{"+5", "05", "0x5", " 5", "", "-5"} {
		if _, err := x.answer(a, "1", "0x"+strings.Repeat("ab", 16)); err == nil || !strings.Contains(err.Error(), "algorithm") {
			t.Fatalf("CHAP_A %q: %v", a, err)
		}
	}
	ans, err := x.answer("5", "3", "0x000102030405060708090a0b0c0d0e0f")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, kv := range ans {
		keys[kv[0]] = kv[1]
	}
	if keys["CHAP_N"] != "u" || keys["CHAP_I"] == "" || len(keys["CHAP_C"]) != 2+32 {
		t.Fatalf("answer %v", keys)
	}
	// The target's correct answer verifies; a wrong one does not.
	chl, _ := ParseCHAPBinary(keys["CHAP_C"])
	var id uint8
	for _, c := range keys["CHAP_I"] {
		id = id*10 + uint8(c-'0')
	}
	good, _ := CHAPResponse(CHAPMD5, id, []byte("mutualsecret"), chl)
	if err := x.verifyTarget("tgt", FormatCHAPBinary(good)); err != nil {
		t.Fatal(err)
	}
	bad, _ := CHAPResponse(CHAPMD5, id, []byte("wrongsecret!"), chl)
	if err := x.verifyTarget("tgt", FormatCHAPBinary(bad)); err == nil {
		t.Fatal("wrong mutual response accepted")
	}
	if err := x.verifyTarget("someone", FormatCHAPBinary(good)); err == nil {
		t.Fatal("wrong target name accepted")
	}
}

func TestParseCHAPIdentifier(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // -1: refused
	}{
		{"0", 0}, {"7", 7}, {"16", 16}, {"255", 255}, {"100", 100},
		{"", -1}, {"256", -1}, {"1000", -1}, {"-1", -1}, {"+1", -1}, {"0x10", -1}, {"0X10", -1},
		{"0b10", -1}, {"010", -1}, {"00", -1}, {" 1", -1}, {"1 ", -1}, {"1e2", -1}, {"ff", -1},
		{"99999999999999999999", -1}, {"१", -1},
	} {
		got, err := parseCHAPIdentifier(tc.in)
		switch {
		case tc.want < 0 && err == nil:
			t.Errorf("%q accepted as %d", tc.in, got)
		case tc.want >= 0 && (err != nil || int(got) != tc.want):
			t.Errorf("%q: %d, %v; want %d", tc.in, got, err, tc.want)
		case err != nil && !strings.Contains(err.Error(), "CHAP_I"):
			t.Errorf("%q: error %q does not name CHAP_I", tc.in, err)
		}
	}
}

func TestCHAPExchangeRefusesChallenges(t *testing.T) {
	sent := make([]byte, 32)
	for i := range sent {
		sent[i] = byte(0xa0 + i)
	}
	sentChallenges.add(sent)
	for _, tc := range []struct{ name, c, want string }{
		{"15 bytes", "0x" + strings.Repeat("ab", 15), "15 bytes"},
		{"1025 bytes", "0x" + strings.Repeat("ab", 1025), "1025 bytes"},
		{"reflected", FormatCHAPBinary(sent), "reflection"},
		{"reflected as base64", "0b" + base64.StdEncoding.EncodeToString(sent), "reflection"},
	} {
		x := &chapExchange{creds: &CHAPCredentials{User: "u", Secret: []byte("s3cr3ts3cr3t")}}
		ans, err := x.answer("5", "1", tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, %v", tc.name, ans, err)
		}
	}
	x := &chapExchange{creds: &CHAPCredentials{User: "u", Secret: []byte("s3cr3ts3cr3t")}}
	if _, err := x.answer("5", "1", "0x"+strings.Repeat("ab", 16)); err != nil {
		t.Errorf("16-byte challenge: %v", err)
	}
}

func TestCHAPExchangeRecordsOurChallenge(t *testing.T) {
	x := &chapExchange{creds: &CHAPCredentials{User: "u", Secret: []byte("s3cr3ts3cr3t"),
		MutualUser: "tgt", MutualSecret: []byte("mutualsecret")}}
	if _, err := x.answer("5", "3", "0x"+strings.Repeat("cd", 16)); err != nil {
		t.Fatal(err)
	}
	if !sentChallenges.contains(x.mutualChl) {
		t.Fatal("our challenge was not recorded")
	}
	y := &chapExchange{creds: x.creds}
	if _, err := y.answer("5", "3", FormatCHAPBinary(x.mutualChl)); err == nil {
		t.Fatal("our own challenge accepted from the target on another exchange")
	}
}

func TestCHAPCredentialsValidate(t *testing.T) {
	for _, tc := range []struct {
		c  CHAPCredentials
		ok bool
	}{
		{CHAPCredentials{User: "u", Secret: []byte("onewaysecret")}, true},
		{CHAPCredentials{User: "u", Secret: []byte("onewaysecret"), MutualUser: "t", MutualSecret: []byte("mutualsecret")}, true},
		{CHAPCredentials{User: "u", Secret: []byte("samesecret12"), MutualUser: "t", MutualSecret: []byte("samesecret12")}, false},
	} {
		err := tc.c.Validate()
		if (err == nil) != tc.ok || (err != nil && strings.Contains(err.Error(), "\n")) {
			t.Errorf("%+v: %v", tc.c, err)
		}
	}
}

func TestChallengeLogBounded(t *testing.T) {
	l := newChallengeLog(3)
	c := func(i int) []byte { return []byte{byte(i), 1, 2, 3} }
	for i := range 5 {
		l.add(c(i))
	}
	for i := range 5 {
		if got, want := l.contains(c(i)), i >= 2; got != want {
			t.Errorf("challenge %d: contains %v, want %v", i, got, want)
		}
	}
	if len(l.set) != 3 || len(l.ring) != 3 {
		t.Errorf("%d in the set, %d in the ring; want 3", len(l.set), len(l.ring))
	}
	l.add(c(4)) // again: no duplicate slot
	if len(l.set) != 3 || !l.contains(c(2)) {
		t.Errorf("a repeated add evicted a challenge")
	}
}

func TestChallengeLogConcurrent(t *testing.T) {
	l := newChallengeLog(64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				b := []byte{byte(g), byte(i)}
				l.add(b)
				_ = l.contains(b)
			}
		}()
	}
	wg.Wait()
	if len(l.set) != 64 || len(l.ring) != 64 {
		t.Fatalf("%d in the set, %d in the ring; want 64", len(l.set), len(l.ring))
	}
}
