package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// streamConn is a net.Conn whose peer is a fixed byte stream: reads come
// from in, writes are kept in out.
type streamConn struct {
	in  *bytes.Reader
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *streamConn) Read(p []byte) (int, error) { return c.in.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}
func (c *streamConn) Close() error                     { return nil }
func (c *streamConn) LocalAddr() net.Addr              { return &net.UnixAddr{Name: "fuzz", Net: "unix"} }
func (c *streamConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Name: "fuzz", Net: "unix"} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// clientStream builds a client byte stream: greeting flags, NBD_OPT_GO for
// name, then the given requests.
func clientStream(name string, reqs ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, flagCFixedNewstyle|flagCNoZeroes)
	gd := appendInfoRequest(nil, infoRequest{Name: name, Infos: []uint16{infoBlockSize, infoName}})
	b = appendOptionHeader(b, optionHeader{Option: optGo, Length: uint32(len(gd))})
	b = append(b, gd...)
	for _, r := range reqs {
		b = append(b, r...)
	}
	return b
}

func req(r request, payload ...byte) []byte { return append(appendRequest(nil, r), payload...) }

func sessionSeeds() [][]byte {
	opt := func(o uint32, data []byte) []byte {
		return append(appendOptionHeader(nil, optionHeader{Option: o, Length: uint32(len(data))}), data...)
	}
	flags := binary.BigEndian.AppendUint32(nil, flagCFixedNewstyle)
	return [][]byte{
		clientStream("f",
			req(request{Type: cmdWrite, Handle: 1, Offset: 512, Length: 512}, bytes.Repeat([]byte{7}, 512)...),
			req(request{Type: cmdRead, Handle: 2, Offset: 512, Length: 1024}),
			req(request{Type: cmdFlush, Handle: 3}),
			req(request{Type: cmdTrim, Handle: 4, Length: 4096}),
			req(request{Type: cmdWriteZeroes, Flags: cmdFlagNoHole | cmdFlagFUA, Handle: 5, Offset: 8192, Length: 4096}),
			req(request{Type: cmdRead, Handle: 6, Offset: 1 << 20, Length: 512}),
			req(request{Type: cmdWrite, Handle: 7, Offset: 3, Length: 8}, make([]byte, 8)...),
			req(request{Type: cmdDisc})),
		clientStream("", req(request{Type: cmdCache, Length: 512}), req(request{Type: 99})),
		clientStream("f", req(request{Type: cmdWrite, Length: 33 << 20})),
		append(append([]byte(nil), flags...), append(opt(optList, nil), opt(optExportName, []byte("f"))...)...),
		append(append([]byte(nil), flags...), append(opt(optStructuredReply, nil), opt(optAbort, nil)...)...),
		append(append([]byte(nil), flags...), opt(optInfo, []byte{0, 0, 0, 200, 1})...),
		append(append([]byte(nil), flags...), opt(optGo, appendInfoRequest(nil, infoRequest{Name: "nope"}))...),
	}
}

// FuzzSession feeds arbitrary client bytes to a whole connection. The
// server must neither panic nor hang, must start with its greeting, and
// must never pass the backend a request a correct server would reject.
func FuzzSession(f *testing.F) {
	for _, s := range sessionSeeds() {
		f.Add(s)
	}
	mem := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20, BlockSize: 512, MaxTransfer: 4096})
	s, err := NewServer([]Export{{Name: "f", Backend: mem}}, Options{MaxInFlight: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		nc := &streamConn{in: bytes.NewReader(in)}
		c := newConn(s, context.Background(), nc)
		done := make(chan struct{})
		go func() {
			c.serve()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("connection did not end at end of input")
		}
		if out := nc.out.Bytes(); len(out) < 18 || binary.BigEndian.Uint64(out) != nbdMagic {
			t.Fatalf("no greeting: % x", out[:min(len(out), 18)])
		}
		if st := mem.Stats(); st.Violations != 0 {
			t.Fatalf("backend got a bad call: %s", st.LastViolation)
		}
	})
}

// FuzzInfoRequest: NBD_OPT_INFO/GO data is parsed strictly, so whatever
// parses must re-encode to the same bytes.
func FuzzInfoRequest(f *testing.F) {
	f.Add(appendInfoRequest(nil, infoRequest{Name: "disk", Infos: []uint16{infoBlockSize, infoName, infoDescription}}))
	f.Add(appendInfoRequest(nil, infoRequest{}))
	f.Add([]byte{0, 0, 0, 9, 'a', 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseInfoRequest(data)
		if err != nil {
			return
		}
		if got := appendInfoRequest(nil, r); !bytes.Equal(got, data) {
			t.Fatalf("round trip: % x -> %+v -> % x", data, r, got)
		}
	})
}

// FuzzRequest: a request header round-trips, and a request the check
// accepts is in range, aligned, of a supported type and within limits.
func FuzzRequest(f *testing.F) {
	f.Add(appendRequest(nil, request{Type: cmdRead, Offset: 4096, Length: 4096}), uint32(512), int64(1<<20), uint8(0))
	f.Add(appendRequest(nil, request{Type: cmdWrite, Flags: cmdFlagFUA, Offset: 1<<64 - 512, Length: 1024}), uint32(512), int64(1<<40), uint8(1))
	f.Add(appendRequest(nil, request{Type: cmdWriteZeroes, Flags: cmdFlagNoHole, Length: 1 << 31}), uint32(4096), int64(1<<32), uint8(2))
	f.Add(appendRequest(nil, request{Type: cmdTrim, Length: 4096}), uint32(65536), int64(1<<30), uint8(7))
	f.Fuzz(func(t *testing.T, hdr []byte, blockSize uint32, size int64, props uint8) {
		r, err := parseRequest(hdr)
		if err != nil {
			return
		}
		if got := appendRequest(nil, r); !bytes.Equal(got, hdr[:requestHeaderLen]) {
			t.Fatalf("round trip % x -> % x", hdr[:requestHeaderLen], got)
		}
		g, err := geometryOf(fakeGeometry{blockSize: blockSize, size: size, props: props})
		if err != nil {
			return
		}
		if g.check(r) != 0 {
			return
		}
		end := r.Offset + uint64(r.Length)
		switch {
		case r.Type != cmdRead && r.Type != cmdWrite && r.Type != cmdFlush && r.Type != cmdTrim && r.Type != cmdWriteZeroes:
			t.Fatalf("accepted type %d", r.Type)
		case r.Type == cmdFlush:
			if r.Offset != 0 || r.Length != 0 {
				t.Fatalf("accepted flush with range %d+%d", r.Offset, r.Length)
			}
		case r.Length == 0, end < r.Offset, end > uint64(size):
			t.Fatalf("accepted out-of-range %+v for size %d", r, size)
		case r.Offset%uint64(blockSize) != 0 || r.Length%blockSize != 0:
			t.Fatalf("accepted misaligned %+v for block size %d", r, blockSize)
		case (r.Type == cmdRead || r.Type == cmdWrite) && r.Length > maxPayload:
			t.Fatalf("accepted %d-byte payload", r.Length)
		case r.Type != cmdRead && props&1 != 0:
			t.Fatalf("accepted %+v on a read-only export", r)
		case r.Type == cmdTrim && props&2 != 0, r.Type == cmdWriteZeroes && props&4 != 0:
			t.Fatalf("accepted unsupported %+v", r)
		}
	})
}

// fakeGeometry is a Backend that only answers the geometry questions.
type fakeGeometry struct {
	Backend
	blockSize uint32
	size      int64
	props     uint8
}

func (f fakeGeometry) Size() int64                { return f.size }
func (f fakeGeometry) BlockSize() uint32          { return f.blockSize }
func (f fakeGeometry) PreferredBlockSize() uint32 { return 4096 }
func (f fakeGeometry) MaxTransfer() uint32        { return 0 }
func (f fakeGeometry) ReadOnly() bool             { return f.props&1 != 0 }
func (f fakeGeometry) CanTrim() bool              { return f.props&2 == 0 }
func (f fakeGeometry) CanWriteZeroes() bool       { return f.props&4 == 0 }

// recordingListener keeps what each client sent.
type recordingListener struct {
	net.Listener
	mu      sync.Mutex
	streams []*bytes.Buffer
}

type recordingConn struct {
	net.Conn
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (l *recordingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := new(bytes.Buffer)
	l.streams = append(l.streams, buf)
	return &recordingConn{Conn: nc, mu: &l.mu, buf: buf}, nil
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.buf.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// TestCaptureSeeds records what real clients send and stores it as the
// FuzzSession seed corpus. It runs only when asked:
//
//	NBD_CAPTURE_SEEDS=1 go test ./nbd -run TestCaptureSeeds
func TestCaptureSeeds(t *testing.T) {
	if os.Getenv("NBD_CAPTURE_SEEDS") == "" {
		t.Skip("set NBD_CAPTURE_SEEDS=1 to rewrite testdata/fuzz/FuzzSession from real clients")
	}
	e, _ := memExport("f", nbdtest.Config{Size: 1 << 20, BlockSize: 512})
	s, err := NewServer([]Export{e}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	l, err := Listen("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: l}
	go s.Serve(context.Background(), rl)
	uri := "nbd+unix:///f?socket=" + sock
	runs := map[string][]string{
		"nbdinfo":      {"nbdinfo", uri},
		"nbdinfo-list": {"nbdinfo", "--list", uri},
		"qemu-io": {"qemu-io", "-f", "raw", "-d", "unmap", "-t", "writeback",
			"-c", "write -P 0x55 0 4k", "-c", "write -f 4k 512", "-c", "write -z 8k 4k",
			"-c", "write -z -u 12k 4k", "-c", "discard 16k 4k", "-c", "flush", "-c", "read 0 8k", uri},
	}
	out := filepath.Join("testdata", "fuzz", "FuzzSession")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, args := range runs {
		before := len(rl.streams)
		if b, err := runTool(t, 30*time.Second, args[0], args[1:]...); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		time.Sleep(100 * time.Millisecond) // let the server read the final bytes
		rl.mu.Lock()
		for i, buf := range rl.streams[before:] {
			seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", buf.Bytes())
			p := filepath.Join(out, fmt.Sprintf("%s-%d", strings.ReplaceAll(name, " ", "_"), i))
			if err := os.WriteFile(p, []byte(seed), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		rl.mu.Unlock()
	}
}
