package discovery

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/iser-attach/iser-attach/initiator/textkey"
)

func TestParsePortal(t *testing.T) {
	tests := []struct {
		in     string
		want   Portal
		str    string
		errSub string
	}{
		{in: "10.0.0.1", want: Portal{"10.0.0.1", 3260, -1}, str: "10.0.0.1:3260"},
		{in: "10.0.0.1:3261", want: Portal{"10.0.0.1", 3261, -1}, str: "10.0.0.1:3261"},
		{in: "10.0.0.1:3260,1", want: Portal{"10.0.0.1", 3260, 1}, str: "10.0.0.1:3260"},
		{in: "10.0.0.1,65535", want: Portal{"10.0.0.1", 3260, 65535}},
		{in: "[fe80::1]:3260", want: Portal{"fe80::1", 3260, -1}, str: "[fe80::1]:3260"},
		{in: "[fe80::1]", want: Portal{"fe80::1", 3260, -1}, str: "[fe80::1]:3260"},
		{in: "[fe80::1%eth0]:3262,2", want: Portal{"fe80::1%eth0", 3262, 2}, str: "[fe80::1%eth0]:3262"},
		{in: "[::ffff:10.0.0.1]:3260", want: Portal{"::ffff:10.0.0.1", 3260, -1}},
		{in: "fd00::10", want: Portal{"fd00::10", 3260, -1}, str: "[fd00::10]:3260"},
		{in: "::1,1", want: Portal{"::1", 3260, 1}},
		{in: "host.example", want: Portal{"host.example", 3260, -1}, str: "host.example:3260"},
		{in: "storage-01.lab.example:3260,3", want: Portal{"storage-01.lab.example", 3260, 3}},
		{in: "localhost:1", want: Portal{"localhost", 1, -1}},
		{in: "10.0.0.1:03260", want: Portal{"10.0.0.1", 3260, -1}},

		{in: "", errSub: "empty address"},
		{in: ",1", errSub: "empty address"},
		{in: "10.0.0.1:", errSub: "empty port"},
		{in: "10.0.0.1:0", errSub: "out of range"},
		{in: "10.0.0.1:65536", errSub: "out of range"},
		{in: "10.0.0.1:-1", errSub: "decimal"},
		{in: "10.0.0.1:+1", errSub: "decimal"},
		{in: "10.0.0.1:32 60", errSub: "decimal"},
		{in: "10.0.0.1:3260,", errSub: "group tag"},
		{in: "10.0.0.1:3260,65536", errSub: "group tag"},
		{in: "10.0.0.1:3260,x", errSub: "group tag"},
		{in: "10.0.0.256", errSub: "not an IPv4"},
		{in: "10.0.0", errSub: "not an IPv4"},
		{in: "1234", errSub: "not an IPv4"},
		{in: "fe80::1:3260:x", errSub: "brackets"},
		{in: "fe80::zz", errSub: "brackets"},
		{in: "[fe80::1", errSub: "missing ']'"},
		{in: "[fe80::1]3260", errSub: "after ']'"},
		{in: "[fe80::1]:", errSub: "empty port"},
		{in: "[10.0.0.1]:3260", errSub: "not an IPv6"},
		{in: "[host]:3260", errSub: "not an IPv6"},
		{in: "bad_host:3260", errSub: "bad character"},
		{in: "-bad.example", errSub: "label"},
		{in: "a..b", errSub: "label"},
		{in: "host.example.", errSub: "label"},
		{in: strings.Repeat("a", 64) + ".example", errSub: "label"},
		{in: "host:3260:1", errSub: "brackets"},
		// iscsiadm prints ip:port,tpgt; one portal per string, a comma
		// never lists several.
		{in: "[fe80::1%eth0]:3260,1", want: Portal{"fe80::1%eth0", 3260, 1}, str: "[fe80::1%eth0]:3260"},
		{in: "127.0.0.1:3260,0", want: Portal{"127.0.0.1", 3260, 0}, str: "127.0.0.1:3260"},
		{in: "10.0.0.1:3260,1,10.0.0.2:3260,1", errSub: "more than one ','"},
		{in: "10.0.0.1:3260,1,2", errSub: "more than one ','"},
		{in: "10.0.0.1:3260, 1", errSub: "group tag"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePortal(tt.in)
			if tt.errSub != "" {
				if err == nil {
					t.Fatalf("ParsePortal(%q) = %+v, want error containing %q", tt.in, got, tt.errSub)
				}
				if !errors.Is(err, ErrBadPortal) || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("error %q: want ErrBadPortal containing %q", err, tt.errSub)
				}
				if !strings.Contains(err.Error(), "parse portal") {
					t.Fatalf("error %q does not name the operation", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePortal(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParsePortal(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if tt.str != "" && got.String() != tt.str {
				t.Fatalf("String() = %q, want %q", got.String(), tt.str)
			}
		})
	}
}

func TestParseSendTargets(t *testing.T) {
	kv := func(k, v string) textkey.KV { return textkey.KV{Key: k, Value: v} }
	tests := []struct {
		name   string
		in     []textkey.KV
		want   []Target
		errSub string
	}{
		{name: "empty", in: nil, want: nil},
		{
			name: "multi-target multi-portal",
			in: []textkey.KV{
				kv("TargetName", "iqn.2003-01.org.linux-iscsi.st.x8664:sn.1"),
				kv("TargetAddress", "192.168.1.10:3260,1"),
				kv("TargetAddress", "[fd00::10]:3260,1"),
				kv("TargetAlias", "ignored"),
				kv("TargetName", "iqn.2003-01.org.linux-iscsi.st.x8664:sn.2"),
				kv("TargetAddress", "192.168.1.10:3261,2"),
				kv("X-com.example.hint", "x"),
				kv("TargetAddress", "storage.example,3"),
			},
			want: []Target{
				{Name: "iqn.2003-01.org.linux-iscsi.st.x8664:sn.1", Portals: []Portal{
					{"192.168.1.10", 3260, 1}, {"fd00::10", 3260, 1}}},
				{Name: "iqn.2003-01.org.linux-iscsi.st.x8664:sn.2", Portals: []Portal{
					{"192.168.1.10", 3261, 2}, {"storage.example", 3260, 3}}},
			},
		},
		{
			name: "no address",
			in:   []textkey.KV{kv("TargetName", "eui.02004567A425678D")},
			want: []Target{{Name: "eui.02004567A425678D"}},
		},
		{
			name: "repeated name merges, repeated portal kept once",
			in: []textkey.KV{
				kv("TargetName", "naa.52004567BA64678D"), kv("TargetAddress", "10.0.0.1:3260,1"),
				kv("TargetName", "iqn.2024-01.org.example:b"),
				kv("TargetName", "naa.52004567BA64678D"), kv("TargetAddress", "10.0.0.1:3260,1"),
				kv("TargetAddress", "10.0.0.2:3260,1"),
			},
			want: []Target{
				{Name: "naa.52004567BA64678D", Portals: []Portal{{"10.0.0.1", 3260, 1}, {"10.0.0.2", 3260, 1}}},
				{Name: "iqn.2024-01.org.example:b"},
			},
		},
		{name: "address first", in: []textkey.KV{kv("TargetAddress", "10.0.0.1:3260,1")}, errSub: "before any TargetName"},
		{name: "empty address", in: []textkey.KV{kv("TargetName", "iqn.a"), kv("TargetAddress", "")}, errSub: "empty address"},
		{name: "bad port", in: []textkey.KV{kv("TargetName", "iqn.a"), kv("TargetAddress", "10.0.0.1:99999,1")}, errSub: "port"},
		{name: "bad tag", in: []textkey.KV{kv("TargetName", "iqn.a"), kv("TargetAddress", "10.0.0.1:3260,-1")}, errSub: "group tag"},
		{name: "unbracketed v6 with port", in: []textkey.KV{kv("TargetName", "iqn.a"), kv("TargetAddress", "fd00::1:3260,1")}, want: []Target{{Name: "iqn.a", Portals: []Portal{{"fd00::1:3260", 3260, 1}}}}},
		{name: "empty name", in: []textkey.KV{kv("TargetName", "")}, errSub: "empty target name"},
		{name: "bad name", in: []textkey.KV{kv("TargetName", "disk1")}, errSub: "iqn."},
		{name: "name with space", in: []textkey.KV{kv("TargetName", "iqn.a b")}, errSub: "space"},
		{name: "name too long", in: []textkey.KV{kv("TargetName", "iqn."+strings.Repeat("a", 220))}, errSub: "223"},
		{name: "unexpected key", in: []textkey.KV{kv("TargetName", "iqn.a"), kv("MaxBurstLength", "1")}, errSub: "unexpected key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSendTargets(tt.in)
			if tt.errSub != "" {
				if !errors.Is(err, ErrBadSendTargets) || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("err = %v, want ErrBadSendTargets containing %q", err, tt.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Responses captured from tgtd 1.0.x (Debian 12 package tgt) by
// initiator/textkey's TestTgtdDiscoveryAndLogin -tgt.capture, for discovery
// sessions over IPv4 and IPv6 loopback.
func TestParseSendTargetsTgtd(t *testing.T) {
	for file, host := range map[string]string{
		"tgt-sendtargets-ipv4.txt": "127.0.0.1",
		"tgt-sendtargets-ipv6.txt": "::1",
	} {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			kvs, err := textkey.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseSendTargets(kvs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0].Name != "iqn.2024-01.org.iser-attach:disk1" || got[1].Name != "iqn.2024-01.org.iser-attach:disk2" {
				t.Fatalf("targets %+v", got)
			}
			for _, tg := range got {
				if len(tg.Portals) != 1 {
					t.Fatalf("%s portals %+v", tg.Name, tg.Portals)
				}
				p := tg.Portals[0]
				if p.Host != host || p.GroupTag != 1 || p.Port < 1024 {
					t.Fatalf("%s portal %+v", tg.Name, p)
				}
			}
		})
	}
}

// An LIO-style response: LIO (drivers/target/iscsi/iscsi_target.c
// iscsit_build_sendtargets_response) lists every network portal of every
// enabled TPG, IPv6 in brackets, tag after the comma.
func TestParseSendTargetsLIOStyle(t *testing.T) {
	data := []byte("TargetName=iqn.2003-01.org.linux-iscsi.storage.x8664:sn.4a5b6c7d8e9f\x00" +
		"TargetAddress=192.168.122.10:3260,1\x00TargetAddress=[fd00::10]:3260,1\x00" +
		"TargetName=iqn.2003-01.org.linux-iscsi.storage.x8664:sn.0011223344ff\x00" +
		"TargetAddress=192.168.122.10:3261,2\x00")
	kvs, err := textkey.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSendTargets(kvs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{Name: "iqn.2003-01.org.linux-iscsi.storage.x8664:sn.4a5b6c7d8e9f",
			Portals: []Portal{{"192.168.122.10", 3260, 1}, {"fd00::10", 3260, 1}}},
		{Name: "iqn.2003-01.org.linux-iscsi.storage.x8664:sn.0011223344ff",
			Portals: []Portal{{"192.168.122.10", 3261, 2}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	if back := textkey.Encode(EncodeSendTargets(got)); string(back) != string(data) {
		t.Fatalf("EncodeSendTargets = %q, want %q", back, data)
	}
}

func FuzzParsePortal(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1:3260,1", "[fe80::1%eth0]:3260", "fd00::1", "host.example:3261,2", "[::1]",
		// iscsiadm's ip:port,tpgt, and lists a comma never makes.
		"[fe80::1%eth0]:3260,1", "127.0.0.1:3260,65535", "10.0.0.1:3260,1,10.0.0.2:3260,1", "10.0.0.1,1,2", "[fd00::1],0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePortal(s)
		if err != nil {
			if !errors.Is(err, ErrBadPortal) {
				t.Fatalf("error %v is not ErrBadPortal", err)
			}
			return
		}
		if p.Host == "" || p.Port < 1 || p.Port > 65535 || p.GroupTag < -1 || p.GroupTag > 65535 {
			t.Fatalf("ParsePortal(%q) = %+v", s, p)
		}
		back, err := ParsePortal(p.String())
		if err != nil {
			t.Fatalf("ParsePortal(String() = %q): %v", p.String(), err)
		}
		want := p
		want.GroupTag = -1
		if back != want {
			t.Fatalf("round trip %q -> %+v -> %q -> %+v", s, p, p.String(), back)
		}
	})
}

func FuzzParseSendTargets(f *testing.F) {
	for _, s := range []string{
		"TargetName=iqn.a\x00TargetAddress=10.0.0.1:3260,1\x00",
		"TargetName=iqn.a\x00TargetAddress=[::1]:3260,1\x00TargetName=iqn.b\x00TargetAddress=h.example,2\x00",
		"TargetAddress=10.0.0.1\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		kvs, err := textkey.Parse(data)
		if err != nil {
			return
		}
		targets, err := ParseSendTargets(kvs)
		if err != nil {
			if !errors.Is(err, ErrBadSendTargets) {
				t.Fatalf("error %v is not ErrBadSendTargets", err)
			}
			return
		}
		// The canonical encoding parses back to the same targets.
		enc := EncodeSendTargets(targets)
		back, err := ParseSendTargets(enc)
		if err != nil {
			t.Fatalf("re-parse %q: %v", enc, err)
		}
		if !reflect.DeepEqual(back, targets) {
			t.Fatalf("round trip %+v != %+v", back, targets)
		}
		for _, tg := range targets {
			if tg.Name == "" {
				t.Fatal("target without a name")
			}
		}
	})
}
