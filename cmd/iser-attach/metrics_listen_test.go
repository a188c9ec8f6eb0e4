package main

import (
	"context"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/metrics"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
	"github.com/iser-attach/iser-attach/volume"
)

type pathOnlyDevice string

func (d pathOnlyDevice) Path() string                 { return string(d) }
func (d pathOnlyDevice) Detach(context.Context) error { return nil }

// TestAttachedStats: an attached volume's control socket answers stats
// with what passed through its counting backend.
func TestAttachedStats(t *testing.T) {
	volumeEnv(t)
	counting := counting.New(nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20}))
	defer counting.Close()
	a := &attached{name: "db", dev: pathOnlyDevice("/dev/nbd9"), counting: counting}
	ctl, err := volume.ListenControl("db", a)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buf := make([]byte, 4096)
	for i := 0; i < 3; i++ {
		if err := counting.WriteAt(ctx, buf, int64(i)*4096, false); err != nil {
			t.Fatal(err)
		}
	}
	st, err := volume.QueryStats(ctx, volume.SocketPath("db"))
	if err != nil {
		t.Fatal(err)
	}
	if w := st.IO.Op(metrics.OpWrite); st.Name != "db" || st.Device != "/dev/nbd9" || st.TimeNanos == 0 || w.Count != 3 || w.Bytes != 3*4096 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSessionStateNames(t *testing.T) {
	want := map[initiator.NexusState]string{initiator.NexusUp: "attached", initiator.NexusRecovering: "recovering",
		initiator.NexusFailed: "failed", initiator.NexusClosed: "closed"}
	for s, name := range want {
		if got := sessionStateName(s); got != name {
			t.Errorf("%v: %q, want %q", s, got, name)
		}
	}
	// Every name is one the state gauge exports.
	for _, name := range want {
		found := false
		for _, s := range metrics.SessionStates {
			found = found || s == name
		}
		if !found {
			t.Errorf("%q is not in metrics.SessionStates", name)
		}
	}
}
