package volume

import (
	"net"
	"os"
	"testing"
)

// TestServeControlSocket: a serve process's socket is listed by ListServe
// and never by List or Find (it cannot be taken for a volume, whatever the
// volumes are named); Close removes it, and a stale one is cleaned up.
func TestServeControlSocket(t *testing.T) {
	tempRunDir(t)
	fc := &fakeController{st: Status{Kind: "serve", Name: "exp", Listen: []string{"unix:/tmp/x"}, PID: os.Getpid()}}
	s, err := ListenServeControl(fc)
	if err != nil {
		t.Fatal(err)
	}
	serves, err := ListServe(ctx2(t))
	if err != nil || len(serves) != 1 || serves[0].Kind != "serve" || serves[0].Name != "exp" || serves[0].Listen[0] != "unix:/tmp/x" {
		t.Fatalf("ListServe: %v %+v", err, serves)
	}
	if vols, err := List(ctx2(t)); err != nil || len(vols) != 0 {
		t.Fatalf("List shows a serve process: %v %+v", err, vols)
	}
	if _, _, err := Find(ctx2(t), "exp"); err == nil {
		t.Fatal("Find found a serve process by its export name")
	}
	s.Close()
	if _, err := os.Stat(ServeSocketPath(os.Getpid())); !os.IsNotExist(err) {
		t.Fatalf("socket left after Close: %v", err)
	}

	// A socket whose process is gone: nobody accepts on it.
	stale := ServeSocketPath(1)
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if serves, err := ListServe(ctx2(t)); err != nil || len(serves) != 0 {
		t.Fatalf("ListServe with a stale socket: %v %+v", err, serves)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale socket not removed: %v", err)
	}
}
