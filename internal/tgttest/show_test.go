package tgttest

import (
	"reflect"
	"testing"
)

// Captured from tgtadm 1.0.85 with qemu-nbd logged in to target 2.
const showTwoTargets = `Target 1: iqn.t:a
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
    LUN information:
        LUN: 0
            Type: controller
    Account information:
    ACL information:
        ALL
Target 2: iqn.t:s
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
        I_T nexus: 1
            Initiator: iqn.2008-11.org.linux-kvm alias: none
            Connection: 0
                IP Address: 127.0.0.1
        I_T nexus: 7
            Initiator: iqn.2024-01.io.iser-attach:x alias: box
            Connection: 0
                IP Address: 127.0.0.1
            Connection: 1
                IP Address: 127.0.0.2
    LUN information:
        LUN: 0
            Type: controller
    Account information:
    ACL information:
        ALL
`

func TestParseSessions(t *testing.T) {
	got, err := parseSessions(showTwoTargets, "iqn.t:s")
	if err != nil {
		t.Fatal(err)
	}
	want := []Session{
		{Nexus: 1, Initiator: "iqn.2008-11.org.linux-kvm", Connections: []string{"127.0.0.1"}},
		{Nexus: 7, Initiator: "iqn.2024-01.io.iser-attach:x", Alias: "box", Connections: []string{"127.0.0.1", "127.0.0.2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got, err := parseSessions(showTwoTargets, "iqn.t:a"); err != nil || len(got) != 0 {
		t.Errorf("target without sessions: %+v, %v", got, err)
	}
	if _, err := parseSessions(showTwoTargets, "iqn.t:none"); err == nil {
		t.Error("unknown target: no error")
	}
}
