package tgttest

import (
	"net"
	"strings"
	"testing"
)

const procNetTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0CBC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C350 0100007F:0CBC 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:0CBC 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:C352 0100007F:0CBC 08 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:C354 0100007F:0CBC 06 00000000:00000000 00:00000000 00000000     0        0 0 3 0000000000000000
   5: 0100007F:C356 0100007F:0CBD 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 20 4 30 10 -1
`

func TestCountOpenTo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table string
		port  int
		want  int
		err   string
	}{
		// Line 1 (ESTABLISHED) and 3 (CLOSE_WAIT) connect to 0x0CBC;
		// line 0 listens on it, line 2 is the server's end, line 4 is
		// TIME_WAIT, line 5 goes to another port.
		{name: "table", table: procNetTCP, port: 0x0CBC, want: 2},
		{name: "other port", table: procNetTCP, port: 0x0CBD, want: 1},
		{name: "none", table: procNetTCP, port: 3270, want: 0},
		{name: "header only", table: "  sl  local_address rem_address   st\n", port: 3260, want: 0},
		{name: "short line", table: "header\n 0: 0100007F:0CBC\n", port: 3260, err: "short line"},
		{name: "no port", table: "header\n 0: 0100007F:0CBC 0100007F 01\n", port: 3260, err: "no port"},
		{name: "bad port", table: "header\n 0: 0100007F:0CBC 0100007F:XYZ 01\n", port: 3260, err: "remote port"},
		{name: "bad state", table: "header\n 0: 0100007F:0CBC 0100007F:0CBC ZZ\n", port: 3260, err: "state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := countOpenTo(strings.NewReader(tc.table), tc.port)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("countOpenTo: %d, %v; want an error naming %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("countOpenTo = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestInitiatorSockets opens and closes connections to a listener and
// reads the count back from the kernel's tables.
func TestInitiatorSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &Server{port: ln.Addr().(*net.TCPAddr).Port}
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if n, err := s.InitiatorSockets(); err != nil || n != 2 {
		t.Fatalf("with two connections: InitiatorSockets = %d, %v; want 2", n, err)
	}
	conns[0].Close()
	if n, err := s.InitiatorSockets(); err != nil || n != 1 {
		t.Fatalf("with one closed: InitiatorSockets = %d, %v; want 1", n, err)
	}
	conns[1].Close()
}
