package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
	"github.com/rs/zerolog"
)

var _ Backend = (*nbdtest.Memory)(nil)

// testServer is a Server listening on a Unix socket in a short temporary
// directory (sun_path is limited to 108 bytes, t.TempDir paths can be longer).
type testServer struct {
	*Server
	sock   string
	served chan error
}

func startServer(t testing.TB, exports []Export, opts Options) *testServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbdt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if testing.Verbose() {
		opts.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	}
	s, err := NewServer(exports, opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	sock := filepath.Join(dir, "nbd.sock")
	l, err := Listen("unix:" + sock)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ts := &testServer{Server: s, sock: sock, served: make(chan error, 1)}
	go func() { ts.served <- s.Serve(context.Background(), l) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-ts.served:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after Close")
		}
	})
	return ts
}

// uri is the NBD URI of an export, for libnbd tools.
func (ts *testServer) uri(name string) string {
	return "nbd+unix:///" + name + "?socket=" + ts.sock
}

func memExport(name string, cfg nbdtest.Config) (Export, *nbdtest.Memory) {
	m := nbdtest.NewMemory(cfg)
	var b Backend = m
	switch {
	case reapingBackends:
		b = m.Reaping()
	case asyncBackends:
		b = m.Async()
	}
	return Export{Name: name, Description: "test export " + name, Backend: b}, m
}

// asyncBackends makes memExport's backends blockdev.Async, and
// reapingBackends also blockdev.Reaping, whose completions the writer
// reaps (bothPaths).
var asyncBackends, reapingBackends bool

// bothPaths runs f with blocking backends, then with blockdev.Async ones,
// then with ones whose completions the connection's writer reaps.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	t.Run("blocking", f)
	t.Run("async", func(t *testing.T) {
		asyncBackends = true
		defer func() { asyncBackends = false }()
		f(t)
	})
	t.Run("reaped", func(t *testing.T) {
		reapingBackends = true
		defer func() { reapingBackends = false }()
		f(t)
	})
}

// rawClient is a minimal NBD client that lets tests send anything.
type rawClient struct {
	t      testing.TB
	nc     net.Conn
	br     *bufio.Reader
	size   uint64
	tflags uint16
}

func dialRaw(t testing.TB, sock string) *rawClient {
	t.Helper()
	return dialRawNet(t, "unix", sock)
}

func dialRawNet(t testing.TB, network, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// greet reads the server greeting and sends client flags.
func (c *rawClient) greet(clientFlags uint32) {
	c.t.Helper()
	var b [18]byte
	c.read(b[:])
	if binary.BigEndian.Uint64(b[0:]) != nbdMagic || binary.BigEndian.Uint64(b[8:]) != iHaveOpt {
		c.t.Fatalf("bad greeting % x", b)
	}
	if hf := binary.BigEndian.Uint16(b[16:]); hf != flagFixedNewstyle|flagNoZeroes {
		c.t.Fatalf("handshake flags %#x", hf)
	}
	c.write(binary.BigEndian.AppendUint32(nil, clientFlags))
}

func (c *rawClient) read(p []byte) {
	c.t.Helper()
	if _, err := io.ReadFull(c.br, p); err != nil {
		c.t.Fatalf("read: %v", err)
	}
}

func (c *rawClient) write(p []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(p); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawClient) sendOption(opt uint32, data []byte) {
	c.t.Helper()
	b := appendOptionHeader(nil, optionHeader{Option: opt, Length: uint32(len(data))})
	c.write(append(b, data...))
}

type optReply struct {
	option, typ uint32
	data        []byte
}

func (c *rawClient) readOptReply() optReply {
	c.t.Helper()
	var b [20]byte
	c.read(b[:])
	if m := binary.BigEndian.Uint64(b[0:]); m != optReplyMagic {
		c.t.Fatalf("option reply magic %#x", m)
	}
	r := optReply{option: binary.BigEndian.Uint32(b[8:]), typ: binary.BigEndian.Uint32(b[12:])}
	r.data = make([]byte, binary.BigEndian.Uint32(b[16:]))
	c.read(r.data)
	return r
}

// readOptReplies reads replies up to and including the final one (ACK or an
// error).
func (c *rawClient) readOptReplies() []optReply {
	c.t.Helper()
	var rs []optReply
	for {
		r := c.readOptReply()
		rs = append(rs, r)
		if r.typ == repAck || r.typ&repFlagError != 0 {
			return rs
		}
	}
}

// goExport runs NBD_OPT_GO and fails the test unless it succeeds.
func (c *rawClient) goExport(name string) {
	c.t.Helper()
	c.greet(flagCFixedNewstyle | flagCNoZeroes)
	c.sendOption(optGo, appendInfoRequest(nil, infoRequest{Name: name, Infos: []uint16{infoBlockSize}}))
	for _, r := range c.readOptReplies() {
		switch {
		case r.typ&repFlagError != 0:
			c.t.Fatalf("NBD_OPT_GO: error reply %#x %q", r.typ, r.data)
		case r.typ == repInfo && binary.BigEndian.Uint16(r.data) == infoExport:
			c.size = binary.BigEndian.Uint64(r.data[2:])
			c.tflags = binary.BigEndian.Uint16(r.data[10:])
		}
	}
}

func (c *rawClient) send(r request, payload []byte) {
	c.t.Helper()
	c.write(append(appendRequest(nil, r), payload...))
}

// readReply reads one simple reply; readLen gives the payload length of a
// successful reply for each outstanding READ handle.
func (c *rawClient) readReply(readLen map[uint64]int) (handle uint64, errno uint32, data []byte) {
	c.t.Helper()
	var b [replyHeaderLen]byte
	c.read(b[:])
	if m := binary.BigEndian.Uint32(b[0:]); m != simpleReplyMag {
		c.t.Fatalf("reply magic %#x", m)
	}
	errno = binary.BigEndian.Uint32(b[4:])
	handle = binary.BigEndian.Uint64(b[8:])
	if n, ok := readLen[handle]; ok && errno == 0 {
		data = make([]byte, n)
		c.read(data)
	}
	return handle, errno, data
}

// do sends one request and waits for its reply.
func (c *rawClient) do(r request, payload []byte) (uint32, []byte) {
	c.t.Helper()
	c.send(r, payload)
	lens := map[uint64]int{}
	if r.Type == cmdRead {
		lens[r.Handle] = int(r.Length)
	}
	h, errno, data := c.readReply(lens)
	if h != r.Handle {
		c.t.Fatalf("reply handle %d, want %d", h, r.Handle)
	}
	return errno, data
}

// expectClosed checks that the server dropped the connection.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	// A reset is a close too: the server may close with our bytes unread.
	if n, err := io.Copy(io.Discard, c.br); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || n != 0 {
		c.t.Fatalf("want connection closed at once, got %d bytes, err %v", n, err)
	}
}
