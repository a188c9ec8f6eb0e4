package nbd

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

func TestExportInfo(t *testing.T) {
	e, _ := memExport("lun0", nbdtest.Config{Size: 1 << 20, BlockSize: 4096, NoTrim: true})
	ro, _ := memExport("ro", nbdtest.Config{Size: 1 << 20, ReadOnly: true})
	s, err := NewServer([]Export{e, ro}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, err := s.ExportInfo("")
	if err != nil {
		t.Fatal(err)
	}
	want := ExportInfo{Name: "lun0", Size: 1 << 20, BlockSize: 4096, PreferredBlockSize: 4096, MaxBlockSize: 32 << 20,
		TransmissionFlags: FlagHasFlags | FlagSendFlush | FlagSendFUA | FlagCanMultiConn | FlagSendWriteZeroes}
	if info != want {
		t.Fatalf("info %+v, want %+v", info, want)
	}
	if info, err := s.ExportInfo("ro"); err != nil || info.TransmissionFlags&FlagReadOnly == 0 {
		t.Fatalf("read-only export: %+v, %v", info, err)
	}
	if _, err := s.ExportInfo("nope"); err == nil {
		t.Fatal("unknown export has info")
	}
}

// transmissionPair serves one end of a socket pair with ServeTransmission
// and returns a raw client on the other end, and the serve result.
func transmissionPair(t *testing.T, s *Server, ctx context.Context, export string) (*rawClient, <-chan error) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close() })
	done := make(chan error, 1)
	go func() { done <- s.ServeTransmission(ctx, b, export) }()
	a.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, nc: a, br: bufio.NewReader(a)}, done
}

func TestServeTransmission(t *testing.T) {
	e, mem := memExport("lun0", nbdtest.Config{Size: 1 << 20})
	s, err := NewServer([]Export{e}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// No handshake: the first bytes are requests.
	c, done := transmissionPair(t, s, context.Background(), "lun0")
	payload := make([]byte, 4096)
	for i := range payload {
		payload[i] = byte(i)
	}
	if errno, _ := c.do(request{Type: cmdWrite, Flags: cmdFlagFUA, Handle: 1, Offset: 8192, Length: 4096}, payload); errno != 0 {
		t.Fatalf("write errno %d", errno)
	}
	errno, data := c.do(request{Type: cmdRead, Handle: 2, Offset: 8192, Length: 4096}, nil)
	if errno != 0 || string(data) != string(payload) {
		t.Fatalf("read back errno %d", errno)
	}
	if errno, _ := c.do(request{Type: cmdFlush, Handle: 3}, nil); errno != 0 {
		t.Fatalf("flush errno %d", errno)
	}
	c.send(request{Type: cmdDisc, Handle: 4}, nil)
	if err := <-done; err != nil {
		t.Fatalf("ServeTransmission after NBD_CMD_DISC: %v", err)
	}
	if st := mem.Stats(); st.FUAWrites != 1 || st.Flushes != 1 {
		t.Fatalf("backend %+v", st)
	}

	// Cancelling ctx stops the connection; Shutdown waits for it first.
	ctx, cancel := context.WithCancel(context.Background())
	_, done = transmissionPair(t, s, ctx, "")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeTransmission after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeTransmission ignored its ctx")
	}

	if _, done = transmissionPair(t, s, context.Background(), "missing"); <-done == nil {
		t.Fatal("unknown export served")
	}

	c, done = transmissionPair(t, s, context.Background(), "lun0")
	if errno, _ := c.do(request{Type: cmdFlush, Handle: 5}, nil); errno != 0 { // the connection is live
		t.Fatalf("flush errno %d", errno)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("ServeTransmission after Shutdown: %v", err)
	}
	if _, done = transmissionPair(t, s, context.Background(), "lun0"); !errors.Is(<-done, ErrServerClosed) {
		t.Fatal("closed server served a connection")
	}
}
