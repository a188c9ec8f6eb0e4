package volume

import (
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/blockdev/counting"
	"github.com/iser-attach/iser-attach/metrics"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// statsController is a fakeController that also answers "stats" from a
// counting backend.
type statsController struct {
	fakeController
	c *counting.Backend
}

func (s *statsController) Stats() Stats {
	return Stats{Name: s.st.Name, Device: s.st.Device, TimeNanos: time.Now().UnixNano(), IO: s.c.Snapshot()}
}

func TestControlStats(t *testing.T) {
	tempRunDir(t)
	mem := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20})
	c := counting.New(mem)
	defer c.Close()
	sc := &statsController{fakeController: fakeController{st: Status{Name: "vol1", Device: "/dev/nbd2"}}, c: c}
	s, err := ListenControl("vol1", sc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctx2(t)
	buf := make([]byte, 8192)
	for i := 0; i < 3; i++ {
		if err := c.WriteAt(ctx, buf, int64(i)*8192, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ReadAt(ctx, buf[:4096], 0); err != nil {
		t.Fatal(err)
	}
	_ = c.ReadAt(ctx, buf, 2<<20) // beyond the end: an error
	if err := c.Trim(ctx, 0, 65536); err != nil {
		t.Fatal(err)
	}
	st, err := QueryStats(ctx, SocketPath("vol1"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "vol1" || st.Device != "/dev/nbd2" || st.TimeNanos == 0 {
		t.Fatalf("stats %+v", st)
	}
	w, r, d := st.IO.Op(metrics.OpWrite), st.IO.Op(metrics.OpRead), st.IO.Op(metrics.OpDiscard)
	if w.Count != 3 || w.Bytes != 3*8192 || w.Errors != 0 || r.Count != 2 || r.Bytes != 4096+8192 || r.Errors != 1 ||
		d.Count != 1 || d.Bytes != 65536 {
		t.Fatalf("write %+v read %+v discard %+v", w, r, d)
	}
	var inBuckets uint64
	for _, n := range w.Buckets {
		inBuckets += n
	}
	if inBuckets != 3 || len(st.IO.BoundsSeconds) != len(w.Buckets)-1 {
		t.Fatalf("write histogram %v over %d bounds", w.Buckets, len(st.IO.BoundsSeconds))
	}
	// "status" goes on working next to "stats".
	resp, err := Query(ctx, SocketPath("vol1"), Request{Op: "status"})
	if err != nil || !resp.OK || resp.Status == nil || resp.Status.Name != "vol1" || resp.Stats != nil {
		t.Fatalf("status: %v %+v", err, resp)
	}
}

func TestControlStatsUnsupported(t *testing.T) {
	tempRunDir(t)
	s, err := ListenControl("plain", &fakeController{st: Status{Name: "plain"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := QueryStats(ctx2(t), SocketPath("plain")); err == nil || !strings.Contains(err.Error(), "does not report stats") {
		t.Fatalf("stats from a controller without them: %v", err)
	}
}
