package textkey

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

type negCase struct {
	name   string
	offers []KV
	prefs  []KV
	text   bool // Text (full feature phase) negotiation
	target []KV
	reply  []KV              // expected answers
	errKey string            // non-empty: Receive must fail with a *ProtocolError on this key
	result map[string]string // expected Result values
}

func runNeg(t *testing.T, tc negCase) *Negotiation {
	t.Helper()
	n := NewNegotiation()
	if tc.text {
		n = NewTextNegotiation()
	}
	for _, kv := range tc.prefs {
		if err := n.Prefer(kv.Key, kv.Value); err != nil {
			t.Fatalf("Prefer: %v", err)
		}
	}
	for _, kv := range tc.offers {
		if err := n.Offer(kv.Key, kv.Value); err != nil {
			t.Fatalf("Offer: %v", err)
		}
	}
	if got := n.TakeOffers(); !reflect.DeepEqual(got, nilIfEmpty(tc.offers)) {
		t.Fatalf("TakeOffers = %q, want %q", got, tc.offers)
	}
	reply, err := n.Receive(tc.target)
	if tc.errKey != "" {
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Fatalf("Receive err = %v, want *ProtocolError on %s", err, tc.errKey)
		}
		if pe.Key != tc.errKey {
			t.Fatalf("ProtocolError on %q (%v), want %q", pe.Key, pe, tc.errKey)
		}
		if !strings.Contains(pe.Error(), tc.errKey) {
			t.Fatalf("message %q does not name the key", pe)
		}
		if _, err2 := n.Receive(nil); err2 != err {
			t.Fatalf("error not sticky: %v", err2)
		}
		return n
	}
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if !reflect.DeepEqual(reply, nilIfEmpty(tc.reply)) {
		t.Fatalf("reply = %q, want %q", reply, tc.reply)
	}
	for k, want := range tc.result {
		if got, _ := n.Result(k); got != want {
			t.Errorf("Result(%s) = %q, want %q", k, got, want)
		}
	}
	return n
}

func nilIfEmpty(kvs []KV) []KV {
	if len(kvs) == 0 {
		return nil
	}
	return kvs
}

func kv(k, v string) KV { return KV{k, v} }

func TestNegotiationAnswers(t *testing.T) {
	tests := []negCase{
		// List.
		{name: "list first choice", offers: []KV{kv("HeaderDigest", "CRC32C,None")},
			target: []KV{kv("HeaderDigest", "CRC32C")}, result: map[string]string{"HeaderDigest": "CRC32C"}},
		{name: "list second choice", offers: []KV{kv("HeaderDigest", "CRC32C,None")},
			target: []KV{kv("HeaderDigest", "None")}, result: map[string]string{"HeaderDigest": "None"}},
		{name: "list answer not offered", offers: []KV{kv("DataDigest", "None")},
			target: []KV{kv("DataDigest", "CRC32C")}, errKey: "DataDigest"},
		{name: "list answer is a list", offers: []KV{kv("DataDigest", "CRC32C,None")},
			target: []KV{kv("DataDigest", "CRC32C,None")}, errKey: "DataDigest"},
		{name: "list answer empty", offers: []KV{kv("DataDigest", "None")},
			target: []KV{kv("DataDigest", "")}, errKey: "DataDigest"},
		{name: "list reject keeps default", offers: []KV{kv("HeaderDigest", "CRC32C")},
			target: []KV{kv("HeaderDigest", "Reject")}, result: map[string]string{"HeaderDigest": "None"}},

		// NumMin.
		{name: "min lower answer", offers: []KV{kv("MaxBurstLength", "262144")},
			target: []KV{kv("MaxBurstLength", "65536")}, result: map[string]string{"MaxBurstLength": "65536"}},
		{name: "min equal answer", offers: []KV{kv("MaxBurstLength", "262144")},
			target: []KV{kv("MaxBurstLength", "262144")}, result: map[string]string{"MaxBurstLength": "262144"}},
		{name: "min hex answer", offers: []KV{kv("FirstBurstLength", "65536")},
			target: []KV{kv("FirstBurstLength", "0x2000")}, result: map[string]string{"FirstBurstLength": "0x2000"}},
		{name: "min answer above offer", offers: []KV{kv("MaxBurstLength", "65536")},
			target: []KV{kv("MaxBurstLength", "262144")}, errKey: "MaxBurstLength"},
		{name: "min answer below range", offers: []KV{kv("MaxBurstLength", "65536")},
			target: []KV{kv("MaxBurstLength", "511")}, errKey: "MaxBurstLength"},
		{name: "min answer not a number", offers: []KV{kv("MaxOutstandingR2T", "1")},
			target: []KV{kv("MaxOutstandingR2T", "one")}, errKey: "MaxOutstandingR2T"},
		{name: "min answer zero for 1..65535", offers: []KV{kv("MaxConnections", "1")},
			target: []KV{kv("MaxConnections", "0")}, errKey: "MaxConnections"},
		{name: "ErrorRecoveryLevel 3", offers: []KV{kv("ErrorRecoveryLevel", "2")},
			target: []KV{kv("ErrorRecoveryLevel", "3")}, errKey: "ErrorRecoveryLevel"},
		{name: "min zero-unlimited offer takes any", offers: []KV{kv("MaxOutstandingUnexpectedPDUs", "0")},
			target: []KV{kv("MaxOutstandingUnexpectedPDUs", "16")}, result: map[string]string{"MaxOutstandingUnexpectedPDUs": "16"}},
		{name: "min zero-unlimited answer above limit", offers: []KV{kv("MaxOutstandingUnexpectedPDUs", "16")},
			target: []KV{kv("MaxOutstandingUnexpectedPDUs", "0")}, errKey: "MaxOutstandingUnexpectedPDUs"},
		{name: "min iSER recv length", offers: []KV{kv("TargetRecvDataSegmentLength", "65536")},
			target: []KV{kv("TargetRecvDataSegmentLength", "8192")}, result: map[string]string{"TargetRecvDataSegmentLength": "8192"}},

		// NumMax.
		{name: "max higher answer", offers: []KV{kv("DefaultTime2Wait", "2")},
			target: []KV{kv("DefaultTime2Wait", "5")}, result: map[string]string{"DefaultTime2Wait": "5"}},
		{name: "max answer below offer", offers: []KV{kv("DefaultTime2Wait", "5")},
			target: []KV{kv("DefaultTime2Wait", "2")}, errKey: "DefaultTime2Wait"},
		{name: "max answer above range", offers: []KV{kv("DefaultTime2Wait", "5")},
			target: []KV{kv("DefaultTime2Wait", "3601")}, errKey: "DefaultTime2Wait"},

		// Booleans.
		{name: "and yes yes", offers: []KV{kv("ImmediateData", "Yes")},
			target: []KV{kv("ImmediateData", "Yes")}, result: map[string]string{"ImmediateData": "Yes"}},
		{name: "and yes no", offers: []KV{kv("ImmediateData", "Yes")},
			target: []KV{kv("ImmediateData", "No")}, result: map[string]string{"ImmediateData": "No"}},
		{name: "and no yes is illegal", offers: []KV{kv("ImmediateData", "No")},
			target: []KV{kv("ImmediateData", "Yes")}, errKey: "ImmediateData"},
		{name: "or no yes", offers: []KV{kv("InitialR2T", "No")},
			target: []KV{kv("InitialR2T", "Yes")}, result: map[string]string{"InitialR2T": "Yes"}},
		{name: "or yes no is illegal", offers: []KV{kv("InitialR2T", "Yes")},
			target: []KV{kv("InitialR2T", "No")}, errKey: "InitialR2T"},
		{name: "bool lowercase", offers: []KV{kv("DataPDUInOrder", "No")},
			target: []KV{kv("DataPDUInOrder", "yes")}, errKey: "DataPDUInOrder"},
		{name: "RDMAExtensions yes", offers: []KV{kv("RDMAExtensions", "Yes")},
			target: []KV{kv("RDMAExtensions", "Yes")}, result: map[string]string{"RDMAExtensions": "Yes"}},

		// Special answers.
		{name: "irrelevant keeps default", offers: []KV{kv("FirstBurstLength", "8192")},
			target: []KV{kv("FirstBurstLength", "Irrelevant")}, result: map[string]string{"FirstBurstLength": "65536"}},
		{name: "notunderstood on iSER key", offers: []KV{kv("MaxAHSLength", "256")},
			target: []KV{kv("MaxAHSLength", "NotUnderstood")}, result: map[string]string{"MaxAHSLength": "256"}},
		{name: "notunderstood on mandatory key", offers: []KV{kv("MaxBurstLength", "65536")},
			target: []KV{kv("MaxBurstLength", "NotUnderstood")}, errKey: "MaxBurstLength"},
		{name: "extension key answered", offers: []KV{kv("X-com.example.feature", "on")},
			target: []KV{kv("X-com.example.feature", "NotUnderstood")}},

		// Duplicates.
		{name: "answer twice", offers: []KV{kv("MaxBurstLength", "65536")},
			target: []KV{kv("MaxBurstLength", "65536"), kv("MaxBurstLength", "65536")}, errKey: "MaxBurstLength"},
		{name: "offer twice", target: []KV{kv("MaxConnections", "1"), kv("MaxConnections", "1")}, errKey: "MaxConnections"},
		{name: "declare twice", target: []KV{kv("TargetPortalGroupTag", "1"), kv("TargetPortalGroupTag", "1")}, errKey: "TargetPortalGroupTag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runNeg(t, tc) })
	}
}

func TestNegotiationTargetOffers(t *testing.T) {
	tests := []negCase{
		{name: "list default None", target: []KV{kv("HeaderDigest", "CRC32C,None")},
			reply: []KV{kv("HeaderDigest", "None")}, result: map[string]string{"HeaderDigest": "None"}},
		{name: "list preference", prefs: []KV{kv("HeaderDigest", "CRC32C,None")},
			target: []KV{kv("HeaderDigest", "CRC32C,None")}, reply: []KV{kv("HeaderDigest", "CRC32C")}},
		{name: "list target order wins", prefs: []KV{kv("DataDigest", "CRC32C,None")},
			target: []KV{kv("DataDigest", "None,CRC32C")}, reply: []KV{kv("DataDigest", "None")}},
		{name: "list nothing acceptable", target: []KV{kv("DataDigest", "CRC32C")},
			reply: []KV{kv("DataDigest", "Reject")}, result: map[string]string{"DataDigest": "None"}},
		{name: "list unknown values skipped", prefs: []KV{kv("AuthMethod", "CHAP,None")},
			target: []KV{kv("AuthMethod", "Foo,CHAP")}, reply: []KV{kv("AuthMethod", "CHAP")}},
		{name: "list malformed", target: []KV{kv("HeaderDigest", "CRC32C,,None")}, errKey: "HeaderDigest"},

		{name: "min takes ours", prefs: []KV{kv("MaxBurstLength", "65536")},
			target: []KV{kv("MaxBurstLength", "262144")}, reply: []KV{kv("MaxBurstLength", "65536")}},
		{name: "min takes theirs", target: []KV{kv("MaxBurstLength", "16384")},
			reply: []KV{kv("MaxBurstLength", "16384")}, result: map[string]string{"MaxBurstLength": "16384"}},
		{name: "min default", target: []KV{kv("MaxConnections", "8")}, reply: []KV{kv("MaxConnections", "1")}},
		{name: "min out of range rejected", target: []KV{kv("MaxBurstLength", "16777216")},
			reply: []KV{kv("MaxBurstLength", "Reject")}, result: map[string]string{"MaxBurstLength": "262144"}},
		{name: "min malformed", target: []KV{kv("MaxBurstLength", "lots")}, errKey: "MaxBurstLength"},
		{name: "max", target: []KV{kv("DefaultTime2Wait", "0")}, reply: []KV{kv("DefaultTime2Wait", "2")}},
		{name: "max preference", prefs: []KV{kv("DefaultTime2Wait", "0")},
			target: []KV{kv("DefaultTime2Wait", "1")}, reply: []KV{kv("DefaultTime2Wait", "1")}},
		{name: "zero unlimited", target: []KV{kv("MaxOutstandingUnexpectedPDUs", "0")},
			reply: []KV{kv("MaxOutstandingUnexpectedPDUs", "0")}},
		{name: "zero unlimited vs limit", target: []KV{kv("MaxOutstandingUnexpectedPDUs", "8")},
			reply: []KV{kv("MaxOutstandingUnexpectedPDUs", "8")}},

		{name: "and", target: []KV{kv("ImmediateData", "Yes")}, prefs: []KV{kv("ImmediateData", "No")},
			reply: []KV{kv("ImmediateData", "No")}},
		{name: "and default yes", target: []KV{kv("ImmediateData", "Yes")}, reply: []KV{kv("ImmediateData", "Yes")}},
		{name: "or", target: []KV{kv("InitialR2T", "No")}, reply: []KV{kv("InitialR2T", "Yes")}},
		{name: "or preference", target: []KV{kv("InitialR2T", "No")}, prefs: []KV{kv("InitialR2T", "No")},
			reply: []KV{kv("InitialR2T", "No")}, result: map[string]string{"InitialR2T": "No"}},
		{name: "bool malformed", target: []KV{kv("InitialR2T", "maybe")}, errKey: "InitialR2T"},

		{name: "special value as offer", target: []KV{kv("MaxBurstLength", "Reject")}, errKey: "MaxBurstLength"},
		{name: "unknown key", target: []KV{kv("X-com.vendor.thing", "1"), kv("FooBar", "x")},
			reply: []KV{kv("X-com.vendor.thing", "NotUnderstood"), kv("FooBar", "NotUnderstood")}},
		{name: "unknown key special", target: []KV{kv("FooBar", "NotUnderstood")}, errKey: "FooBar"},
		{name: "obsolete marker rejected", target: []KV{kv("OFMarker", "No"), kv("OFMarkInt", "2048~8192")},
			reply: []KV{kv("OFMarker", "Reject"), kv("OFMarkInt", "Reject")}},

		{name: "initiator-only key from target", target: []KV{kv("InitiatorName", "iqn.x")}, errKey: "InitiatorName"},
		{name: "SessionType from target", target: []KV{kv("SessionType", "Normal")}, errKey: "SessionType"},
		{name: "login-only key in text", text: true, target: []KV{kv("MaxBurstLength", "65536")}, errKey: "MaxBurstLength"},
		{name: "MaxRecvDataSegmentLength in text", text: true, target: []KV{kv("MaxRecvDataSegmentLength", "65536")},
			result: map[string]string{"MaxRecvDataSegmentLength": "65536"}},
		{name: "invalid key name", target: []KV{kv("bad key", "1")}, errKey: "bad key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runNeg(t, tc) })
	}
}

func TestNegotiationDeclarative(t *testing.T) {
	tests := []negCase{
		{
			name:   "MaxRecvDataSegmentLength per direction",
			offers: []KV{kv("MaxRecvDataSegmentLength", "262144")},
			target: []KV{kv("MaxRecvDataSegmentLength", "8192")},
			result: map[string]string{"MaxRecvDataSegmentLength": "8192"},
		},
		{name: "MRDSL too small", target: []KV{kv("MaxRecvDataSegmentLength", "511")}, errKey: "MaxRecvDataSegmentLength"},
		{name: "MRDSL too big", target: []KV{kv("MaxRecvDataSegmentLength", "16777216")}, errKey: "MaxRecvDataSegmentLength"},
		{name: "tpgt", target: []KV{kv("TargetPortalGroupTag", "1"), kv("TargetAlias", "disk one")},
			result: map[string]string{"TargetPortalGroupTag": "1", "TargetAlias": "disk one"}},
		{name: "tpgt out of range", target: []KV{kv("TargetPortalGroupTag", "65536")}, errKey: "TargetPortalGroupTag"},
		{name: "alias too long", target: []KV{kv("TargetAlias", strings.Repeat("a", 256))}, errKey: "TargetAlias"},
		{name: "declarative special unasked", target: []KV{kv("TargetAlias", "Reject")}, errKey: "TargetAlias"},
		{name: "declarative answered irrelevant", offers: []KV{kv("InitiatorAlias", "host")},
			target: []KV{kv("InitiatorAlias", "Irrelevant")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runNeg(t, tc) })
	}
}

func TestOfferValidation(t *testing.T) {
	bad := []KV{
		kv("TargetAlias", "x"),          // target-only
		kv("TargetPortalGroupTag", "1"), // target-only
		kv("IFMarker", "No"),            // obsolete
		kv("MaxBurstLength", "100"),     // out of range
		kv("MaxBurstLength", "Reject"),  // special
		kv("ImmediateData", "yes"),      // not a boolean
		kv("HeaderDigest", "CRC32C,"),   // empty element
		kv("SessionType", "Bogus"),      // not an enumerated value
		kv("InitiatorName", strings.Repeat("i", 224)),
		kv("bad key", "1"),
		kv("A", "nul\x00"),
	}
	for _, o := range bad {
		if err := NewNegotiation().Offer(o.Key, o.Value); err == nil {
			t.Errorf("Offer(%q, %.20q) succeeded", o.Key, o.Value)
		}
	}
	n := NewNegotiation()
	if err := n.Offer("MaxBurstLength", "65536"); err != nil {
		t.Fatal(err)
	}
	if err := n.Offer("MaxBurstLength", "65536"); err == nil {
		t.Error("second Offer of the same key succeeded")
	}
	if err := NewTextNegotiation().Offer("ImmediateData", "Yes"); err == nil {
		t.Error("login-only key offered in a Text negotiation")
	}
	if err := NewTextNegotiation().Offer("MaxRecvDataSegmentLength", "65536"); err != nil {
		t.Errorf("MaxRecvDataSegmentLength in Text: %v", err)
	}
	for _, p := range []KV{kv("TargetAlias", "x"), kv("NoSuchKey", "1"), kv("MaxBurstLength", "1"), kv("OFMarker", "No"), kv("InitialR2T", "Irrelevant")} {
		if err := NewNegotiation().Prefer(p.Key, p.Value); err == nil {
			t.Errorf("Prefer(%q, %q) succeeded", p.Key, p.Value)
		}
	}
}

func TestOutstanding(t *testing.T) {
	n := NewNegotiation()
	for _, o := range []KV{
		kv("InitiatorName", "iqn.2024-01.org.example:i"), // declarative: never awaited
		kv("MaxBurstLength", "262144"),
		kv("InitialR2T", "Yes"),    // OR with Yes: result fixed, answer optional
		kv("ImmediateData", "No"),  // AND with No: result fixed
		kv("ImmediateData2", "x"),  // unknown key: NotUnderstood expected
		kv("DataPDUInOrder", "No"), // OR with No: awaited
	} {
		if err := n.Offer(o.Key, o.Value); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.Outstanding(); got != nil {
		t.Fatalf("Outstanding before TakeOffers = %q", got)
	}
	n.TakeOffers()
	want := []string{"MaxBurstLength", "ImmediateData2", "DataPDUInOrder"}
	if got := n.Outstanding(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Outstanding = %q, want %q", got, want)
	}
	if _, err := n.Receive([]KV{kv("MaxBurstLength", "65536"), kv("DataPDUInOrder", "Yes")}); err != nil {
		t.Fatal(err)
	}
	if got := n.Outstanding(); !reflect.DeepEqual(got, []string{"ImmediateData2"}) {
		t.Fatalf("Outstanding = %q", got)
	}
	if v, ok := n.Answer("DataPDUInOrder"); !ok || v != "Yes" {
		t.Fatalf("Answer = %q, %v", v, ok)
	}
	if v, ok := n.Offered("MaxBurstLength"); !ok || v != "262144" {
		t.Fatalf("Offered = %q, %v", v, ok)
	}
	if _, ok := n.Result("TargetAlias"); ok {
		t.Fatal("Result of an undeclared TargetAlias reported ok")
	}
	// Unanswered offers whose result is fixed by our value.
	if v, _ := n.Result("ImmediateData"); v != "No" {
		t.Fatalf("Result(ImmediateData) = %q, want our unanswered No", v)
	}
	if v, _ := n.Result("InitialR2T"); v != "Yes" {
		t.Fatalf("Result(InitialR2T) = %q", v)
	}
}

// An offer still queued when the target offers the same key becomes our
// answer and is not sent again.
func TestQueuedOfferBecomesAnswer(t *testing.T) {
	n := NewNegotiation()
	if err := n.Offer("MaxBurstLength", "65536"); err != nil {
		t.Fatal(err)
	}
	reply, err := n.Receive([]KV{kv("MaxBurstLength", "262144")})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(reply, []KV{kv("MaxBurstLength", "65536")}) {
		t.Fatalf("reply = %q", reply)
	}
	if got := n.TakeOffers(); got != nil {
		t.Fatalf("TakeOffers = %q, want nothing", got)
	}
}

func TestLookup(t *testing.T) {
	for _, name := range []string{
		"HeaderDigest", "DataDigest", "MaxConnections", "SendTargets", "TargetName", "InitiatorName",
		"TargetAlias", "InitiatorAlias", "TargetAddress", "TargetPortalGroupTag", "InitialR2T",
		"ImmediateData", "MaxRecvDataSegmentLength", "MaxBurstLength", "FirstBurstLength",
		"DefaultTime2Wait", "DefaultTime2Retain", "MaxOutstandingR2T", "DataPDUInOrder",
		"DataSequenceInOrder", "ErrorRecoveryLevel", "SessionType", "AuthMethod", "TaskReporting",
		"RDMAExtensions", "InitiatorRecvDataSegmentLength", "TargetRecvDataSegmentLength",
		"MaxOutstandingUnexpectedPDUs", "MaxAHSLength", "TaggedBufferForSolicitedDataOnly", "iSERHelloRequired",
	} {
		d, ok := Lookup(name)
		if !ok {
			t.Errorf("Lookup(%s) missing", name)
			continue
		}
		if err := ValidKey(d.Name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if d.Default != "" && d.Kind != List {
			if err := d.check(d.Default); err != nil {
				t.Errorf("%s default %q: %v", name, d.Default, err)
			}
		}
	}
	d, _ := Lookup("MaxBurstLength")
	if d.Kind != NumMin || d.Min != 512 || d.Max != 1<<24-1 || !d.LoginOnly || d.Default != "262144" {
		t.Errorf("MaxBurstLength = %+v", d)
	}
	d, _ = Lookup("MaxRecvDataSegmentLength")
	if d.Kind != Declarative || d.LoginOnly {
		t.Errorf("MaxRecvDataSegmentLength = %+v", d)
	}
	d, _ = Lookup("HeaderDigest")
	d.Values[0] = "mutated"
	if d2, _ := Lookup("HeaderDigest"); d2.Values[0] != "CRC32C" {
		t.Error("Lookup returned the table's slice")
	}
	if _, ok := Lookup("CHAP_A"); ok {
		t.Error("CHAP_A is the login code's business")
	}
	if len(Keys()) < 30 {
		t.Errorf("Keys() = %d keys", len(Keys()))
	}
	if NumMin.String() != "numerical-min" || Kind(99).String() != "Kind(99)" {
		t.Error("Kind.String")
	}
}
