package initiator

import (
	"encoding/hex"
	"strings"
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
