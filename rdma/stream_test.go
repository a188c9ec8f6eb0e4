//go:build cgo && linux

package rdma

import (
	"context"
	"encoding/binary"
	"testing"
	"time"
)

// A pipelined stream: batched, mostly unsignaled SENDs on one goroutine,
// send completions polled on another, the receiver reposting its ring as
// receives complete. Every message must arrive once, in order.
func TestSendStream(t *testing.T) {
	ip := rdmaAddr(t)
	checkLeaks(t)
	const (
		depth    = 64
		batch    = 16
		messages = 4000
		msgSize  = 512
	)
	p := connect(t, ip, DialOptions{SendDepth: depth, RecvDepth: depth})
	sbuf := register(t, p.server, depth*msgSize)
	cbuf := register(t, p.client, depth*msgSize)
	var ring []RecvWR
	for i := 0; i < depth; i++ {
		ring = append(ring, RecvWR{ID: uint64(i), SGE: sbuf.SGE(i*msgSize, msgSize)})
	}
	if err := p.server.PostRecv(ring); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Receiver: check sequence numbers, repost each slot.
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- func() error {
			out := make([]Completion, 32)
			next := uint32(0)
			for next < messages {
				n, err := p.server.Poll(ctx, out)
				if err != nil {
					return err
				}
				var repost []RecvWR
				for _, c := range out[:n] {
					if err := c.Err(); err != nil {
						return err
					}
					slot := int(c.ID)
					seq := binary.LittleEndian.Uint32(sbuf.Bytes()[slot*msgSize:])
					if seq != next || c.ByteLen != msgSize {
						t.Errorf("slot %d: message %d of %d bytes, want %d", slot, seq, c.ByteLen, next)
					}
					next++
					repost = append(repost, ring[slot])
				}
				if err := p.server.PostRecv(repost); err != nil {
					return err
				}
			}
			return nil
		}()
	}()

	// Sender: the server has depth receives; a credit comes back with
	// each signaled batch (the receiver reposts at least that fast in
	// practice, and RNR retry covers short gaps).
	credits := make(chan struct{}, messages/batch)
	sendDone := make(chan error, 1)
	go func() {
		sendDone <- func() error {
			out := make([]Completion, 8)
			for got := 0; got < messages/batch; {
				n, err := p.client.Poll(ctx, out)
				if err != nil {
					return err
				}
				for _, c := range out[:n] {
					if err := c.Err(); err != nil {
						return err
					}
					credits <- struct{}{}
					got++
				}
			}
			return nil
		}()
	}()
	start := time.Now()
	inflight := 0
	wrs := make([]SendWR, batch)
	for seq := 0; seq < messages; seq += batch {
		if inflight == depth/batch {
			select {
			case <-credits:
				inflight--
			case <-ctx.Done():
				t.Fatal("no send completion")
			}
		}
		for i := range wrs {
			slot := (seq + i) % depth
			binary.LittleEndian.PutUint32(cbuf.Bytes()[slot*msgSize:], uint32(seq+i))
			wrs[i] = SendWR{ID: uint64(seq + i), SGEs: []SGE{cbuf.SGE(slot*msgSize, msgSize)}, Signaled: i == batch-1}
		}
		if err := p.client.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		inflight++
	}
	if err := <-recvDone; err != nil {
		t.Fatal(err)
	}
	if err := <-sendDone; err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("%d messages of %d bytes in %v: %.0f msg/s", messages, msgSize, d, messages/d.Seconds())
}
