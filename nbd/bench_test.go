package nbd

import (
	"testing"

	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// benchmarkIO drives the server over a Unix socket with a pipelined raw
// client at queue depth 32 and reports IOPS and MB/s. The memory backend
// makes this a measure of the server's own overhead.
func benchmarkIO(b *testing.B, typ uint16, size uint32) {
	const depth = 32
	e, _ := memExport("b", nbdtest.Config{Size: 64 << 20, BlockSize: 512})
	ts := startServer(b, []Export{e}, Options{})
	c := dialRaw(b, ts.sock)
	c.goExport("b")
	var payload []byte
	lens := map[uint64]int{}
	if typ == cmdWrite {
		payload = make([]byte, size)
	}
	slots := uint64(64 << 20 / size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	sent, done := 0, 0
	for done < b.N {
		for sent < b.N && sent-done < depth {
			h := uint64(sent)
			if typ == cmdRead {
				lens[h] = int(size)
			}
			c.send(request{Type: typ, Handle: h, Offset: (h % slots) * uint64(size), Length: size}, payload)
			sent++
		}
		h, errno, _ := c.readReply(lens)
		if errno != 0 {
			b.Fatalf("errno %d", errno)
		}
		delete(lens, h)
		done++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
}

func BenchmarkRead4K(b *testing.B)  { benchmarkIO(b, cmdRead, 4096) }
func BenchmarkWrite4K(b *testing.B) { benchmarkIO(b, cmdWrite, 4096) }
func BenchmarkRead1M(b *testing.B)  { benchmarkIO(b, cmdRead, 1<<20) }
func BenchmarkWrite1M(b *testing.B) { benchmarkIO(b, cmdWrite, 1<<20) }
