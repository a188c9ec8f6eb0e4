package initiator

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator/pdu"
)

// tcpPair returns a TCP datamover over loopback and the peer's end.
func tcpPair(t *testing.T) (*TCPDatamover, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	d := NewTCPDatamover(c)
	t.Cleanup(func() { d.Close(); peer.Close() })
	return d, peer
}

// sendWrite queues a WRITE with data as immediate data (up to 8 KiB with
// the default parameters).
func sendWrite(t *testing.T, d *TCPDatamover, itt uint32, data []byte) {
	t.Helper()
	cmd := pdu.SCSICommand{Write: true, ITT: itt, ExpectedDataTransferLength: uint32(len(data))}
	if err := d.SendCommand(&cmd, &Task{ITT: itt, Write: data}); err != nil {
		t.Fatal(err)
	}
}

// readPDUs reads n PDUs of 48 bytes plus data each from peer and returns
// their data segments.
func readPDUs(t *testing.T, peer net.Conn, n, dataLen int) [][]byte {
	t.Helper()
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	var out [][]byte
	for i := 0; i < n; i++ {
		b := make([]byte, pdu.BHSLen+dataLen+pdu.PadLen(dataLen))
		if _, err := io.ReadFull(peer, b); err != nil {
			t.Fatalf("PDU %d: %v", i, err)
		}
		out = append(out, b[pdu.BHSLen:pdu.BHSLen+dataLen])
	}
	return out
}

// Kick writes the commands on the caller's goroutine; a batch writes
// nothing until it ends, then all of it; the writer goroutine does none
// of it.
func TestTCPKickWritesInline(t *testing.T) {
	d, peer := tcpPair(t)
	data := bytes.Repeat([]byte{0xab}, 512)
	sendWrite(t, d, 1, data)
	if err := d.Kick(); err != nil {
		t.Fatal(err)
	}
	readPDUs(t, peer, 1, len(data))

	d.Plug()
	for i := uint32(2); i < 5; i++ {
		sendWrite(t, d, i, data)
		d.Kick()
	}
	d.mu.Lock()
	queued := len(d.queue)
	d.mu.Unlock()
	if queued != 3*2 { // header and data of each
		t.Fatalf("%d buffers queued in a batch, want 6", queued)
	}
	d.Unplug()
	readPDUs(t, peer, 3, len(data))
	if n := d.handed.Load(); n != 0 {
		t.Fatalf("the writer goroutine wrote %d times, want none", n)
	}
}

// A Kick never waits for a peer that does not read: what the socket does
// not take goes to the writer goroutine, and everything arrives in order
// once the peer reads.
func TestTCPKickLeavesSlowPeerToWriter(t *testing.T) {
	d, peer := tcpPair(t)
	peer.(*net.TCPConn).SetReadBuffer(64 << 10)
	const n, size = 2048, 8192 // 16 MiB: more than the socket buffers
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			b := bytes.Repeat([]byte{byte(i)}, size)
			sendWrite(t, d, uint32(i+1), b)
			d.Kick()
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Kick waited for the peer")
	}
	for end := time.Now().Add(10 * time.Second); d.handed.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("nothing left to the writer goroutine with the socket full")
		}
	}
	for i, p := range readPDUs(t, peer, n, size) {
		if p[0] != byte(i) || p[size-1] != byte(i) {
			t.Fatalf("PDU %d carries %#x: out of order", i, p[0])
		}
	}
}
