package tgttest

import (
	"strings"
	"testing"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{Targets: []Target{{}, {IQN: "iqn.2024-01.com.example:b", LUNs: []LUN{{Size: 1 << 20, BlockSize: 4096}, {}}}}}
	if err := c.normalize(); err != nil {
		t.Fatal(err)
	}
	if c.Targets[0].IQN != "iqn.2024-01.io.iser-attach.test:t1" || len(c.Targets[0].LUNs) != 1 ||
		c.Targets[0].LUNs[0].Size != DefaultLUNSize || c.Targets[0].LUNs[0].BlockSize != 512 {
		t.Errorf("defaults of target 1: %+v", c.Targets[0])
	}
	if l := c.Targets[1].LUNs; l[0].BlockSize != 4096 || l[1].Size != DefaultLUNSize {
		t.Errorf("LUNs of target 2: %+v", l)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    []Target
		want string
	}{
		{"bad name", []Target{{IQN: "target1"}}, "not an iSCSI name"},
		{"duplicate", []Target{{IQN: "iqn.2024-01.a.b:x"}, {IQN: "iqn.2024-01.a.b:x"}}, "duplicate"},
		{"block size", []Target{{LUNs: []LUN{{BlockSize: 1024}}}}, "512 or 4096"},
		{"size", []Target{{LUNs: []LUN{{Size: 1000}}}}, "multiple of 512"},
		{"size 4k", []Target{{LUNs: []LUN{{Size: 512 * 9, BlockSize: 4096}}}}, "multiple of 4096"},
		{"mutual alone", []Target{{Mutual: &CHAP{"u", "secretsecret"}}}, "needs CHAP"},
		{"empty secret", []Target{{CHAP: &CHAP{User: "u"}}}, "user and a secret"},
		{"two secrets", []Target{{CHAP: &CHAP{"u", "a"}}, {CHAP: &CHAP{"u", "b"}}}, "two different secrets"},
	} {
		c := Config{Targets: tc.t}
		if err := c.normalize(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
