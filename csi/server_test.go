package csi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestSocketPath(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///run/csi/csi.sock": "/run/csi/csi.sock",
		"unix:/run/csi.sock":       "/run/csi.sock",
		"unix://run/csi.sock":      "",
		"/run/csi.sock":            "",
		"tcp://127.0.0.1:10000":    "",
		"unix://":                  "",
	} {
		got, err := SocketPath(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestListen: a stale socket is replaced, a live one or a file refused.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another process serves it") {
		t.Fatalf("Listen on a live socket = %v", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // a dead process's socket: the file stays, nobody answers
	if _, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	}
	l2, err := Listen(sock)
	if err != nil {
		t.Fatalf("Listen on a stale socket = %v", err)
	}
	l2.Close()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen on a file = %v", err)
	}
}

// TestServe: the services answer on the socket; the Node calls that are
// not built answer Unimplemented; cancelling stops the server and removes
// the socket.
func TestServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestController(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, l, &Identity{Version: "test", Controller: true}, c, mustNode(t, "n1"), zerolog.Nop())
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	info, err := csipb.NewIdentityClient(conn).GetPluginInfo(cctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.Name != PluginName || info.VendorVersion != "test" {
		t.Fatalf("GetPluginInfo = %+v, %v", info, err)
	}
	caps, err := csipb.NewIdentityClient(conn).GetPluginCapabilities(cctx, &csipb.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.Capabilities) != 2 ||
		caps.Capabilities[0].GetService().GetType() != csipb.PluginCapability_Service_CONTROLLER_SERVICE ||
		caps.Capabilities[1].GetVolumeExpansion().GetType() != csipb.PluginCapability_VolumeExpansion_ONLINE {
		t.Fatalf("GetPluginCapabilities = %+v, %v", caps, err)
	}
	if _, err := csipb.NewControllerClient(conn).ControllerPublishVolume(cctx, &csipb.ControllerPublishVolumeRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("ControllerPublishVolume = %v", err)
	}
	if _, err := csipb.NewNodeClient(conn).NodePublishVolume(cctx, &csipb.NodePublishVolumeRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("NodePublishVolume = %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(StopTimeout + 5*time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left: %v", err)
	}
}
