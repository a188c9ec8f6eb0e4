package textkey

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("a", MaxTextLen)
	tests := []struct {
		name string
		in   string
		want []KV
		err  error
	}{
		{name: "empty", in: "", want: nil},
		{name: "only padding", in: "\x00\x00\x00", want: nil},
		{name: "one", in: "HeaderDigest=None\x00", want: []KV{{"HeaderDigest", "None"}}},
		{name: "empty value", in: "SendTargets=\x00", want: []KV{{"SendTargets", ""}}},
		{name: "value with =", in: "X-a=b=c\x00", want: []KV{{"X-a", "b=c"}}},
		{name: "padding", in: "A=1\x00B=2\x00\x00\x00\x00", want: []KV{{"A", "1"}, {"B", "2"}}},
		{
			name: "duplicates kept in order",
			in:   "TargetName=iqn.a\x00TargetAddress=10.0.0.1:3260,1\x00TargetName=iqn.b\x00TargetAddress=[::1]:3260,1\x00",
			want: []KV{
				{"TargetName", "iqn.a"}, {"TargetAddress", "10.0.0.1:3260,1"},
				{"TargetName", "iqn.b"}, {"TargetAddress", "[::1]:3260,1"},
			},
		},
		{name: "utf8 alias", in: "TargetAlias=größe\x00", want: []KV{{"TargetAlias", "größe"}}},
		{name: "key chars", in: "X-com.example.a+b@c_d=1\x00", want: []KV{{"X-com.example.a+b@c_d", "1"}}},
		{name: "public extension", in: "X#Foo=1\x00", want: []KV{{"X#Foo", "1"}}},
		{name: "iSER lowercase key", in: "iSERHelloRequired=No\x00", want: []KV{{"iSERHelloRequired", "No"}}},
		{name: "63-byte key", in: "K" + strings.Repeat("k", 62) + "=v\x00", want: []KV{{"K" + strings.Repeat("k", 62), "v"}}},
		{name: "8192-byte value", in: "CHAP_C=" + long + "\x00", want: []KV{{"CHAP_C", long}}},

		{name: "missing equals", in: "HeaderDigest\x00", err: ErrMissingEquals},
		{name: "empty key", in: "=x\x00", err: ErrEmptyKey},
		{name: "64-byte key", in: "K" + strings.Repeat("k", 63) + "=v\x00", err: ErrKeyTooLong},
		{name: "key starts with digit", in: "1A=x\x00", err: ErrKeyChar},
		{name: "key with colon", in: "A:B=x\x00", err: ErrKeyChar},
		{name: "key with space", in: "A B=x\x00", err: ErrKeyChar},
		{name: "hash not after X", in: "AB#c=x\x00", err: ErrKeyChar},
		{name: "value too long", in: "CHAP_C=" + long + "a\x00", err: ErrValueTooLong},
		{name: "value not utf8", in: "TargetAlias=\xff\xfe\x00", err: ErrValueUTF8},
		{name: "unterminated", in: "A=1\x00B=2", err: ErrUnterminated},
		{name: "unterminated key only", in: "A=1\x00Targ", err: ErrUnterminated},
		{name: "empty pair in middle", in: "A=1\x00\x00B=2\x00", err: ErrEmptyPair},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Parse err = %v, want %v", err, tt.err)
				}
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("Parse err %T is not *SyntaxError", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSyntaxErrorOffset(t *testing.T) {
	_, err := Parse([]byte("A=1\x00B=2\x00b d=3\x00"))
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v", err)
	}
	if se.Offset != 8 || se.Key != "b d" {
		t.Fatalf("offset %d key %q, want 8 \"b d\"", se.Offset, se.Key)
	}
	if !strings.Contains(err.Error(), "offset 8") {
		t.Fatalf("message %q lacks offset", err)
	}
}

func TestEncode(t *testing.T) {
	kvs := []KV{{"InitiatorName", "iqn.2024-01.org.example:host"}, {"SessionType", "Discovery"}, {"SendTargets", ""}}
	want := "InitiatorName=iqn.2024-01.org.example:host\x00SessionType=Discovery\x00SendTargets=\x00"
	if got := string(Encode(kvs)); got != want {
		t.Fatalf("Encode = %q, want %q", got, want)
	}
	if got := Encode(nil); len(got) != 0 {
		t.Fatalf("Encode(nil) = %q", got)
	}
	back, err := Parse(Encode(kvs))
	if err != nil || !reflect.DeepEqual(back, kvs) {
		t.Fatalf("round trip = %q, %v", back, err)
	}
}

func TestEncoder(t *testing.T) {
	e := NewEncoder()
	e.Add("HeaderDigest", "None")
	e.AddKV(KV{"DataDigest", "None"})
	b, err := e.Bytes()
	if err != nil || string(b) != "HeaderDigest=None\x00DataDigest=None\x00" {
		t.Fatalf("Bytes = %q, %v", b, err)
	}
	if e.Len() != len(b) {
		t.Fatalf("Len = %d, want %d", e.Len(), len(b))
	}

	for _, tc := range []struct {
		key, value string
		err        error
	}{
		{"", "x", ErrEmptyKey},
		{"bad key", "x", ErrKeyChar},
		{"A", "x\x00y", ErrValueNUL},
		{"A", "\xff", ErrValueUTF8},
		{"A", strings.Repeat("v", MaxTextLen+1), ErrValueTooLong},
	} {
		e := NewEncoder()
		e.Add(tc.key, tc.value)
		e.Add("Good", "1") // sticky: must not clear the error
		if _, err := e.Bytes(); !errors.Is(err, tc.err) {
			t.Errorf("Add(%q, %.10q): err = %v, want %v", tc.key, tc.value, err, tc.err)
		}
		if !errors.Is(e.Err(), tc.err) {
			t.Errorf("Err() = %v", e.Err())
		}
	}
}

func TestDecoderSticky(t *testing.T) {
	d := NewDecoder([]byte("A=1\x00=2\x00C=3\x00"))
	if !d.Next() || d.Key() != "A" || d.Value() != "1" {
		t.Fatalf("first pair: %q=%q", d.Key(), d.Value())
	}
	if d.Offset() != 4 {
		t.Fatalf("Offset = %d, want 4", d.Offset())
	}
	if d.Next() {
		t.Fatal("Next after bad pair returned true")
	}
	if d.Next() {
		t.Fatal("Next after error returned true")
	}
	if !errors.Is(d.Err(), ErrEmptyKey) {
		t.Fatalf("Err = %v", d.Err())
	}
}

func TestGet(t *testing.T) {
	kvs := []KV{{"TargetName", "a"}, {"TargetAddress", "x"}, {"TargetName", "b"}}
	if v, ok := Get(kvs, "TargetName"); !ok || v != "a" {
		t.Fatalf("Get = %q, %v", v, ok)
	}
	if _, ok := Get(kvs, "TargetAlias"); ok {
		t.Fatal("Get found a missing key")
	}
	if vs := GetAll(kvs, "TargetName"); !reflect.DeepEqual(vs, []string{"a", "b"}) {
		t.Fatalf("GetAll = %q", vs)
	}
	if kv := (KV{"A", "b"}); kv.String() != "A=b" {
		t.Fatalf("String = %q", kv.String())
	}
}

func TestParseNumber(t *testing.T) {
	good := map[string]uint64{
		"0": 0, "8192": 8192, "0x2000": 8192, "0X2000": 8192, "0xffffffffffffffff": 1<<64 - 1,
		"007": 7,
	}
	for in, want := range good {
		if got, err := ParseNumber(in); err != nil || got != want {
			t.Errorf("ParseNumber(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0x", "-1", "+1", " 1", "1 ", "1e3", "0x1g", "18446744073709551616", "0b0000"} {
		if _, err := ParseNumber(in); err == nil {
			t.Errorf("ParseNumber(%q) succeeded", in)
		}
	}
	if FormatNumber(262144) != "262144" {
		t.Fatal("FormatNumber")
	}
	if b, err := ParseBool("Yes"); !b || err != nil {
		t.Fatal("ParseBool(Yes)")
	}
	for _, in := range []string{"yes", "YES", "true", "1", ""} {
		if _, err := ParseBool(in); err == nil {
			t.Errorf("ParseBool(%q) succeeded", in)
		}
	}
	if FormatBool(false) != "No" || FormatBool(true) != "Yes" {
		t.Fatal("FormatBool")
	}
}

func TestEncodeSizes(t *testing.T) {
	kvs := []KV{{"A", "1"}, {"Bb", ""}}
	if got := Encode(kvs); !bytes.Equal(got, []byte("A=1\x00Bb=\x00")) || cap(got) != len(got) {
		t.Fatalf("Encode = %q cap %d", got, cap(got))
	}
}
