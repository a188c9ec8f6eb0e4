package nbd

import (
	"sync"
	"testing"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
)

// batchingBackend holds the reads and writes started inside a batch until
// the batch ends, as the iSER datamover holds their SENDs: a request
// started in a batch that never ends never completes.
type batchingBackend struct {
	nbdtest.AsyncMemory
	mu      sync.Mutex
	open    bool
	held    []func()
	batches int
	largest int // most requests in one batch
}

func (b *batchingBackend) start(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		b.held = append(b.held, f)
		return
	}
	f()
}

func (b *batchingBackend) StartRead(p []byte, off int64, done blockdev.Done, tag uint32) {
	b.start(func() { b.AsyncMemory.StartRead(p, off, done, tag) })
}

func (b *batchingBackend) StartWrite(p []byte, off int64, fua bool, done blockdev.Done, tag uint32) {
	b.start(func() { b.AsyncMemory.StartWrite(p, off, fua, done, tag) })
}

func (b *batchingBackend) BeginBatch() blockdev.Batch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		panic("nested batch")
	}
	b.open = true
	return blockdev.Batch{Held: b}
}

func (b *batchingBackend) EndBatch(blockdev.Batch) {
	b.mu.Lock()
	held := b.held
	b.open, b.held = false, nil
	b.batches++
	b.largest = max(b.largest, len(held))
	b.mu.Unlock()
	for _, f := range held {
		f()
	}
}

func (b *batchingBackend) stats() (batches, largest int, open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batches, b.largest, b.open
}

// Requests that arrive together are started in one batch; the reader ends
// its batch before it waits, for the next request, for a payload, or for
// a budget slot that only a completion frees (without that, the held
// requests would never complete).
func TestReaderBatchesRequests(t *testing.T) {
	m := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20, BlockSize: 512})
	b := &batchingBackend{AsyncMemory: m.Async()}
	ts := startServer(t, []Export{{Name: "b", Backend: b}}, Options{MaxInFlight: 4})
	c := dialRaw(t, ts.sock)
	c.goExport("b")

	// 16 reads in one write: more than the budget of 4.
	var burst []byte
	lens := map[uint64]int{}
	for i := 0; i < 16; i++ {
		burst = append(burst, appendRequest(nil, request{Type: cmdRead, Handle: uint64(i), Offset: uint64(i) * 4096, Length: 4096})...)
		lens[uint64(i)] = 4096
	}
	c.write(burst)
	for i := 0; i < 16; i++ {
		if _, errno, _ := c.readReply(lens); errno != 0 {
			t.Fatalf("errno %d", errno)
		}
	}
	batches, largest, _ := b.stats()
	if largest < 2 || batches > 16 {
		t.Fatalf("%d batches, at most %d requests in one: want requests that came together in one", batches, largest)
	}

	// A write whose payload comes later: its header alone must not keep
	// the read before it held.
	c.send(request{Type: cmdRead, Handle: 100, Length: 4096}, nil)
	c.write(appendRequest(nil, request{Type: cmdWrite, Handle: 101, Length: 4096}))
	if h, errno, _ := c.readReply(map[uint64]int{100: 4096}); h != 100 || errno != 0 {
		t.Fatalf("reply %d errno %d, want the read's", h, errno)
	}
	c.write(make([]byte, 4096))
	if h, errno, _ := c.readReply(nil); h != 101 || errno != 0 {
		t.Fatalf("reply %d errno %d, want the write's", h, errno)
	}
	if _, _, open := b.stats(); open {
		t.Fatal("a batch is open while the reader waits for the next request")
	}
}

// unwrapping is a wrapper that forwards no capability, only Unwrap (a new
// wrapper written without a thought for the fast path).
type unwrapping struct{ Backend }

func (w unwrapping) Unwrap() Backend { return w.Backend }

var _ blockdev.Wrapper = unwrapping{}

// The reader finds Async and Batcher through a wrapper that only unwraps:
// the requests are started in batches still.
func TestReaderBatchesThroughWrapper(t *testing.T) {
	m := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 20, BlockSize: 512})
	b := &batchingBackend{AsyncMemory: m.Async()}
	ts := startServer(t, []Export{{Name: "b", Backend: unwrapping{b}}}, Options{MaxInFlight: 4})
	c := dialRaw(t, ts.sock)
	c.goExport("b")
	var burst []byte
	lens := map[uint64]int{}
	for i := 0; i < 16; i++ {
		burst = append(burst, appendRequest(nil, request{Type: cmdRead, Handle: uint64(i), Offset: uint64(i) * 4096, Length: 4096})...)
		lens[uint64(i)] = 4096
	}
	c.write(burst)
	for i := 0; i < 16; i++ {
		if _, errno, _ := c.readReply(lens); errno != 0 {
			t.Fatalf("errno %d", errno)
		}
	}
	if batches, largest, _ := b.stats(); batches == 0 || largest < 2 {
		t.Fatalf("%d batches, at most %d requests in one, behind a wrapper: want the backend's batches", batches, largest)
	}
}
