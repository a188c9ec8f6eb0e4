package nbd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// Tests that Options.IOTimeout bounds a stall, not a transfer: a slow
// client that keeps making progress is served however long a large
// payload or reply takes. The stalled clients are in limits_test.go
// (TestPayloadDeadline, TestReplyDeadline).

// TestSlowPayload: WRITE payloads sent slowly but steadily, taking twice
// IOTimeout in all with no pause near it, are served, whether the payload
// is kept (a valid WRITE) or drained (a rejected one).
//
// The pause is a fifteenth of the timeout: with a quarter (50 of 200 ms) a
// CI run's race build, next to the other packages' race tests on two
// cores, once went 200 ms without a byte and the server rightly dropped it.
func TestSlowPayload(t *testing.T) {
	const (
		timeout = 600 * time.Millisecond
		size    = 4 << 20
		piece   = 128 << 10
		pause   = 40 * time.Millisecond // 32 pauses: 1.28 s per payload
	)
	e, _ := memExport("a", nbdtest.Config{Size: size})
	_, sock, _ := startLogged(t, []Export{e}, Options{IOTimeout: timeout})
	c := dialRaw(t, sock)
	c.goExport("a")
	payload := make([]byte, size)
	rand.Read(payload)
	trickle := func(r request) {
		t.Helper()
		c.send(r, nil)
		for p := payload; len(p) > 0; p = p[piece:] {
			time.Sleep(pause)
			c.write(p[:piece])
		}
	}

	trickle(request{Type: cmdWrite, Handle: 1, Length: size})
	if h, errno, _ := c.readReply(nil); h != 1 || errno != 0 {
		t.Fatalf("slow write: reply handle %d errno %d, want handle 1 errno 0", h, errno)
	}
	if errno, data := c.do(request{Type: cmdRead, Handle: 2, Length: size}, nil); errno != 0 || !bytes.Equal(data, payload) {
		t.Fatalf("read back after the slow write: errno %d, data equal %v", errno, bytes.Equal(data, payload))
	}

	// Past the end: ENOSPC, the payload is drained under the same rule.
	trickle(request{Type: cmdWrite, Handle: 3, Offset: 4096, Length: size})
	if h, errno, _ := c.readReply(nil); h != 3 || errno != errNoSpc {
		t.Fatalf("slow rejected write: reply handle %d errno %d, want handle 3 errno %d", h, errno, errNoSpc)
	}
	if errno, _ := c.do(request{Type: cmdFlush, Handle: 4}, nil); errno != 0 {
		t.Fatalf("flush after the slow writes: errno %d", errno)
	}
}

// TestSlowReply: a READ reply far larger than the socket buffers, taken
// by the client slowly but steadily (about twice IOTimeout in all), is
// delivered whole and the connection stays up. Its margins are
// TestSlowPayload's.
func TestSlowReply(t *testing.T) {
	const (
		timeout = 600 * time.Millisecond
		size    = 4 << 20
		piece   = 64 << 10
		pause   = 20 * time.Millisecond // 64 pauses: 1.28 s
	)
	e, _ := memExport("a", nbdtest.Config{Size: size})
	_, sock, _ := startLogged(t, []Export{e}, Options{IOTimeout: timeout})
	c := dialRaw(t, sock)
	c.goExport("a")
	payload := make([]byte, size)
	rand.Read(payload)
	if errno, _ := c.do(request{Type: cmdWrite, Handle: 1, Length: size}, payload); errno != 0 {
		t.Fatalf("write: errno %d", errno)
	}

	c.send(request{Type: cmdRead, Handle: 2, Length: size}, nil)
	var hdr [replyHeaderLen]byte
	c.read(hdr[:])
	if m, errno, h := binary.BigEndian.Uint32(hdr[0:]), binary.BigEndian.Uint32(hdr[4:]),
		binary.BigEndian.Uint64(hdr[8:]); m != simpleReplyMag || errno != 0 || h != 2 {
		t.Fatalf("reply header magic %#x errno %d handle %d, want a good reply to handle 2", m, errno, h)
	}
	data := make([]byte, size)
	for p := data; len(p) > 0; p = p[piece:] {
		time.Sleep(pause)
		c.read(p[:piece])
	}
	if !bytes.Equal(data, payload) {
		t.Fatal("slowly read reply differs from the data written")
	}
	if errno, _ := c.do(request{Type: cmdFlush, Handle: 3}, nil); errno != 0 {
		t.Fatalf("flush after the slow read: errno %d", errno)
	}
}

// TestStopBetweenPayloadReads: a stop (stopReading: flag, then a past read
// deadline) that lands while the reader is between two socket reads of a
// payload is not undone by the next read's fresh deadline, although the
// client keeps sending.
func TestStopBetweenPayloadReads(t *testing.T) {
	e, _ := memExport("a", nbdtest.Config{Size: testSize})
	s, err := NewServer([]Export{e}, Options{IOTimeout: time.Minute})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := newConn(s, context.Background(), a)
	defer c.cancel()
	go func() { // the client: sends for as long as anyone reads
		p := make([]byte, 4096)
		for {
			if _, err := b.Write(p); err != nil {
				return
			}
		}
	}()
	err = c.readPayload(request{Type: cmdWrite, Handle: 1, Length: 1 << 20}, func() error {
		if _, err := io.ReadFull(c.br, make([]byte, 4096)); err != nil {
			return err
		}
		c.stopReading()
		// More than the bufio buffer holds: needs a socket read.
		_, err := io.ReadFull(c.br, make([]byte, 128<<10))
		return err
	})
	if !errors.Is(err, errStopped) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("payload read after stopReading returned %v, want it stopped", err)
	}
}
