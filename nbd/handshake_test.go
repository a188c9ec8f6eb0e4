package nbd

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

func handshakeServer(t *testing.T) *testServer {
	a, _ := memExport("a", nbdtest.Config{Size: 1 << 20, BlockSize: 4096, PreferredBlockSize: 65536})
	ro, _ := memExport("ro", nbdtest.Config{Size: 64 << 10, ReadOnly: true})
	ro.Description = ""
	return startServer(t, []Export{a, ro}, Options{})
}

// infoMap indexes NBD_REP_INFO replies by info type.
func infoMap(t *testing.T, rs []optReply) map[uint16][]byte {
	t.Helper()
	m := map[uint16][]byte{}
	for _, r := range rs {
		if r.typ != repInfo {
			continue
		}
		it := binary.BigEndian.Uint16(r.data)
		if _, dup := m[it]; dup {
			t.Errorf("info type %d sent twice", it)
		}
		m[it] = r.data[2:]
	}
	return m
}

func TestHandshakeOptions(t *testing.T) {
	ts := handshakeServer(t)
	tests := []struct {
		name   string
		option uint32
		data   []byte
		// want is the final reply type; check inspects all replies.
		want  uint32
		check func(t *testing.T, rs []optReply)
	}{{
		name: "list", option: optList, want: repAck,
		check: func(t *testing.T, rs []optReply) {
			if len(rs) != 3 || rs[0].typ != repServer || rs[1].typ != repServer {
				t.Fatalf("replies %+v", rs)
			}
			if got := string(rs[0].data); got != "\x00\x00\x00\x01atest export a" {
				t.Errorf("first NBD_REP_SERVER %q", got)
			}
			if got := string(rs[1].data); got != "\x00\x00\x00\x02ro" {
				t.Errorf("second NBD_REP_SERVER %q", got)
			}
		},
	}, {
		name: "list with data", option: optList, data: []byte("x"), want: repErrInvalid,
	}, {
		name: "info all", option: optInfo, want: repAck,
		data: appendInfoRequest(nil, infoRequest{Name: "a", Infos: []uint16{infoName, infoDescription, infoBlockSize, infoName, 999}}),
		check: func(t *testing.T, rs []optReply) {
			m := infoMap(t, rs)
			exp := m[infoExport]
			if len(exp) != 10 {
				t.Fatalf("NBD_INFO_EXPORT %x", exp)
			}
			if size := binary.BigEndian.Uint64(exp); size != 1<<20 {
				t.Errorf("size %d", size)
			}
			want := flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagSendTrim | flagSendWriteZeroes
			if fl := binary.BigEndian.Uint16(exp[8:]); fl != want {
				t.Errorf("transmission flags %#x, want %#x", fl, want)
			}
			if string(m[infoName]) != "a" || string(m[infoDescription]) != "test export a" {
				t.Errorf("name %q description %q", m[infoName], m[infoDescription])
			}
			bs := m[infoBlockSize]
			if len(bs) != 12 || binary.BigEndian.Uint32(bs) != 4096 ||
				binary.BigEndian.Uint32(bs[4:]) != 65536 || binary.BigEndian.Uint32(bs[8:]) != 32<<20 {
				t.Errorf("NBD_INFO_BLOCK_SIZE %x", bs)
			}
		},
	}, {
		name: "info default export is the first", option: optInfo, want: repAck,
		data: appendInfoRequest(nil, infoRequest{Infos: []uint16{infoName}}),
		check: func(t *testing.T, rs []optReply) {
			if got := string(infoMap(t, rs)[infoName]); got != "a" {
				t.Errorf("default export name %q", got)
			}
		},
	}, {
		name: "info read-only export", option: optInfo, want: repAck,
		data: appendInfoRequest(nil, infoRequest{Name: "ro", Infos: []uint16{infoDescription}}),
		check: func(t *testing.T, rs []optReply) {
			m := infoMap(t, rs)
			want := flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn | flagReadOnly
			if fl := binary.BigEndian.Uint16(m[infoExport][8:]); fl != want {
				t.Errorf("transmission flags %#x, want %#x", fl, want)
			}
			if _, ok := m[infoDescription]; ok {
				t.Errorf("empty description sent")
			}
			bs := m[infoBlockSize] // 512 minimum, preferred 4096 (the nbdtest default)
			if binary.BigEndian.Uint32(bs) != 512 || binary.BigEndian.Uint32(bs[4:]) != 4096 {
				t.Errorf("NBD_INFO_BLOCK_SIZE %x", bs)
			}
		},
	}, {
		name: "info unknown export", option: optInfo, want: repErrUnknown,
		data: appendInfoRequest(nil, infoRequest{Name: "nope"}),
		check: func(t *testing.T, rs []optReply) {
			if !strings.Contains(string(rs[0].data), "nope") {
				t.Errorf("error message %q does not name the export", rs[0].data)
			}
		},
	}, {
		name: "info truncated", option: optInfo, want: repErrInvalid, data: []byte{0, 0, 0, 9, 'a'},
	}, {
		name: "info trailing bytes", option: optInfo, want: repErrInvalid,
		data: append(appendInfoRequest(nil, infoRequest{Name: "a"}), 0),
	}, {
		name: "go unknown export", option: optGo, want: repErrUnknown,
		data: appendInfoRequest(nil, infoRequest{Name: "b"}),
	}, {
		name: "info too long", option: optInfo, want: repErrTooBig, data: make([]byte, maxOptionLen+1),
	}, {
		name: "structured reply refused", option: optStructuredReply, want: repErrUnsup,
	}, {
		name: "starttls refused", option: optStartTLS, want: repErrUnsup,
	}, {
		name: "set meta context refused", option: optSetMetaContext, data: []byte("base:allocation"), want: repErrUnsup,
	}, {
		name: "unknown option", option: 0x7fff0001, data: make([]byte, 100), want: repErrUnsup,
	}}
	// All options go over one connection: a server that loses its place in
	// the stream fails every later case.
	c := dialRaw(t, ts.sock)
	c.greet(flagCFixedNewstyle)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			c.sendOption(tt.option, tt.data)
			rs := c.readOptReplies()
			for _, r := range rs {
				if r.option != tt.option {
					t.Errorf("reply for option %d, want %d", r.option, tt.option)
				}
			}
			if got := rs[len(rs)-1].typ; got != tt.want {
				t.Fatalf("final reply %#x (%q), want %#x", got, rs[len(rs)-1].data, tt.want)
			}
			if tt.check != nil {
				tt.check(t, rs)
			}
		})
	}
	c.t = t
	c.sendOption(optAbort, nil)
	if r := c.readOptReply(); r.typ != repAck {
		t.Fatalf("NBD_OPT_ABORT reply %#x", r.typ)
	}
	c.expectClosed()
}

func TestHandshakeExportName(t *testing.T) {
	ts := handshakeServer(t)
	for _, noZeroes := range []bool{false, true} {
		c := dialRaw(t, ts.sock)
		cf := flagCFixedNewstyle
		if noZeroes {
			cf |= flagCNoZeroes
		}
		c.greet(cf)
		c.sendOption(optExportName, []byte("ro"))
		b := make([]byte, 10)
		c.read(b)
		if binary.BigEndian.Uint64(b) != 64<<10 || binary.BigEndian.Uint16(b[8:])&flagReadOnly == 0 {
			t.Fatalf("export name reply %x", b)
		}
		if !noZeroes {
			z := make([]byte, 124)
			c.read(z)
			if strings.Trim(string(z), "\x00") != "" {
				t.Fatalf("reserved bytes not zero")
			}
		}
		// Transmission works right after: a read of block 0.
		c.send(request{Type: cmdRead, Handle: 7, Length: 512}, nil)
		h, errno, data := c.readReply(map[uint64]int{7: 512})
		if h != 7 || errno != 0 || len(data) != 512 {
			t.Fatalf("read after EXPORT_NAME: handle %d errno %d len %d", h, errno, len(data))
		}
	}
}

// Cases where the protocol leaves the server no way to answer: it must drop
// the connection (and not hang or crash).
func TestHandshakeHardDisconnect(t *testing.T) {
	ts := handshakeServer(t)
	tests := []struct {
		name string
		run  func(c *rawClient)
	}{
		{"unknown client flags", func(c *rawClient) { c.greet(flagCFixedNewstyle | 1<<5) }},
		{"bad option magic", func(c *rawClient) {
			c.greet(flagCFixedNewstyle)
			c.write(make([]byte, 16))
		}},
		{"export name unknown", func(c *rawClient) {
			c.greet(flagCFixedNewstyle)
			c.sendOption(optExportName, []byte("nope"))
		}},
		{"export name too long", func(c *rawClient) {
			c.greet(flagCFixedNewstyle)
			c.write(appendOptionHeader(nil, optionHeader{Option: optExportName, Length: 1 << 30}))
		}},
		{"bad request magic", func(c *rawClient) {
			c.goExport("a")
			c.write(make([]byte, requestHeaderLen))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, ts.sock)
			tt.run(c)
			c.expectClosed()
		})
	}
}
