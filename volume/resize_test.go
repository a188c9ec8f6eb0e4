package volume

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type resizeController struct {
	fakeController
	res Resize
	err error
	n   int
}

func (r *resizeController) Resize(ctx context.Context) (Resize, error) {
	r.n++
	return r.res, r.err
}

// The control socket's resize: a Resizer answers with the sizes, or its
// error in one line; a process that cannot resize (a serve process) says so.
func TestControlResize(t *testing.T) {
	tempRunDir(t)
	rc := &resizeController{fakeController: fakeController{st: Status{Name: "vol1", Device: "/dev/ublkb3"}},
		res: Resize{Device: "/dev/ublkb3", OldSize: 1 << 30, NewSize: 2 << 30}}
	s, err := ListenControl("vol1", rc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := Query(ctx2(t), SocketPath("vol1"), Request{Op: "resize"})
	if err != nil || !resp.OK || resp.Resize == nil || *resp.Resize != rc.res || rc.n != 1 {
		t.Fatalf("resize: %v %+v", err, resp)
	}
	rc.err = errors.New("resize /dev/ublkb3: ublk: kernel lacks UBLK_F_UPDATE_SIZE (needs Linux >= 6.16)")
	resp, err = Query(ctx2(t), SocketPath("vol1"), Request{Op: "resize"})
	if err != nil || resp.OK || resp.Error != rc.err.Error() {
		t.Fatalf("resize refused: %v %+v", err, resp)
	}

	s2, err := ListenControl("plain", &fakeController{st: Status{Name: "plain"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	resp, err = Query(ctx2(t), SocketPath("plain"), Request{Op: "resize"})
	if err != nil || resp.OK || !strings.Contains(resp.Error, "cannot resize") {
		t.Fatalf("resize of a process without Resize: %v %+v", err, resp)
	}
}
