package volume

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

type fakeController struct {
	st       Status
	detached chan bool
	mounted  bool
}

func (f *fakeController) Status() Status { return f.st }

func (f *fakeController) Detach(ctx context.Context, force bool) error {
	if f.mounted && !force {
		return errors.New("device is mounted on /mnt")
	}
	f.detached <- force
	return nil
}

func tempRunDir(t *testing.T) {
	old := RunDir
	RunDir = t.TempDir()
	t.Cleanup(func() { RunDir = old })
}

func ctx2(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestControlSocket(t *testing.T) {
	tempRunDir(t)
	fc := &fakeController{st: Status{Name: "vol1", Device: "/dev/ublkb3", PID: 42}, detached: make(chan bool, 2), mounted: true}
	s, err := ListenControl("vol1", fc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := ListenControl("vol1", fc); err == nil || !strings.Contains(err.Error(), "already attached as /dev/ublkb3") {
		t.Fatalf("second attach of the same name: %v", err)
	}
	all, err := List(ctx2(t))
	if err != nil || len(all) != 1 || all[0].Device != "/dev/ublkb3" {
		t.Fatalf("list: %v %+v", err, all)
	}
	path, st, err := Find(ctx2(t), "/dev/ublkb3")
	if err != nil || st.Name != "vol1" || path != SocketPath("vol1") {
		t.Fatalf("find by device: %v %q %+v", err, path, st)
	}
	resp, err := Query(ctx2(t), path, Request{Op: "detach"})
	if err != nil || resp.OK || !strings.Contains(resp.Error, "mounted") {
		t.Fatalf("detach while mounted: %v %+v", err, resp)
	}
	resp, err = Query(ctx2(t), path, Request{Op: "detach", Force: true})
	if err != nil || !resp.OK || !<-fc.detached {
		t.Fatalf("forced detach: %v %+v", err, resp)
	}
	resp, _ = Query(ctx2(t), path, Request{Op: "reboot"})
	if resp.OK || !strings.Contains(resp.Error, "unknown op") {
		t.Fatalf("unknown op: %+v", resp)
	}
	s.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("socket left after Close")
	}
}

func TestStaleSocketReplacedAndPruned(t *testing.T) {
	tempRunDir(t)
	// A socket file nobody serves (a daemon killed with SIGKILL).
	ln, err := net.Listen("unix", SocketPath("old"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	all, err := List(ctx2(t))
	if err != nil || len(all) != 0 {
		t.Fatalf("list: %v %+v", err, all)
	}
	if _, err := os.Stat(SocketPath("old")); !os.IsNotExist(err) {
		t.Fatal("stale socket not pruned")
	}
	s, err := ListenControl("old", &fakeController{st: Status{Name: "old"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"db1", "vol_a.b-c"} {
		if err := ValidName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".x", "a/b", "x y", strings.Repeat("a", 65)} {
		if ValidName(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The socket is 0600 from the moment it exists, whatever the umask: a
// chmod after the bind would leave it open to anyone for a while.
func TestControlSocketPrivateFromTheStart(t *testing.T) {
	tempRunDir(t)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	var mode os.FileMode
	afterListen = func(path string) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Errorf("stat right after listen: %v", err)
			return
		}
		mode = fi.Mode()
	}
	defer func() { afterListen = nil }()
	srv, err := ListenControl("db", &fakeController{st: Status{Name: "db"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if mode&os.ModeSocket == 0 || mode.Perm() != 0o600 {
		t.Fatalf("socket mode right after listen: %v, want 0600", mode)
	}
	// The umask is the process's own again.
	if u := syscall.Umask(0o022); u != 0o022 {
		t.Fatalf("umask left at %#o", u)
	}
}

// A daemon that accepts on its control socket but never answers (stuck)
// costs a listing at most socketAnswerTimeout, and hides no other volume.
// Before, the sockets were asked one after another within the caller's
// context: a stuck "a" used it up and "b", answering, was left out.
func TestListSurvivesAStuckDaemon(t *testing.T) {
	tempRunDir(t)
	old := socketAnswerTimeout
	socketAnswerTimeout = 300 * time.Millisecond
	t.Cleanup(func() { socketAnswerTimeout = old })
	stuck, err := net.Listen("unix", SocketPath("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	go func() {
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	fc := &fakeController{st: Status{Name: "b", Device: "/dev/ublkb1"}, detached: make(chan bool, 1)}
	s, err := ListenControl("b", fc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	all, err := List(ctx)
	if err != nil || len(all) != 1 || all[0].Name != "b" {
		t.Fatalf("list with a stuck daemon: %v %+v (after %v)", err, all, time.Since(start))
	}
	if _, err := os.Stat(SocketPath("a")); err != nil {
		t.Fatalf("a stuck daemon's socket was removed: %v", err)
	}
}
