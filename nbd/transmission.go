package nbd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/iser-attach/iser-attach/blockdev"
	"github.com/iser-attach/iser-attach/internal/freelist"
)

// transmit runs the transmission phase. The calling goroutine reads
// requests; each valid request runs on a worker goroutine (kept for the
// connection's life and reused, at most MaxInFlight of them); one writer
// goroutine serialises the replies. transmit returns after the client sent
// NBD_CMD_DISC (nil), went away, broke the protocol, missed IOTimeout, or
// the server stopped, and only once every worker and the writer have
// finished.
func (c *conn) transmit() error {
	c.budget = newBudget(c.srv.opts.MaxInFlight)
	// Every reply holds a budget slot until the writer has sent it, so the
	// channel never holds more than MaxInFlight replies and sends never
	// block.
	c.replies = make(chan reply, c.srv.opts.MaxInFlight)
	if c.async != nil {
		c.rs = newReaper(c.exp.Backend, c.nc)
	}
	c.jobs = make(chan job)
	defer close(c.jobs) // idle workers exit (after workers.Wait below)
	writerDone := make(chan error, 1)
	go func() { writerDone <- c.writeReplies() }() // owned by transmit

	rerr := c.readRequests()

	// Shutdown order: the reader has stopped; let in-flight requests finish
	// and queue their replies (asynchronous ones until a hard stop); then
	// let the writer drain and flush.
	c.workers.Wait()
	c.waitAsync()
	c.closeReplies()
	werr := <-writerDone
	if c.rs != nil {
		c.rs.close()
	}
	if rerr != nil {
		return rerr
	}
	return werr
}

// readRequests is the reader loop. Between requests it waits without a
// deadline: an idle client is not an error.
func (c *conn) readRequests() error {
	defer c.endBatch()
	var hb [requestHeaderLen]byte
	for {
		// A stop whose past deadline readPayload cleared again is seen
		// here rather than lost.
		if c.stopping.Load() {
			return nil
		}
		if c.br.Buffered() < requestHeaderLen {
			c.endBatch() // the read may wait
		}
		if _, err := io.ReadFull(c.br, hb[:]); err != nil {
			if c.stopping.Load() || errors.Is(err, io.EOF) {
				return nil // server stop, or client hung up between requests
			}
			return fmt.Errorf("read request: %w", err)
		}
		req, err := parseRequest(hb[:])
		if err != nil {
			return err // out of step with the client: drop the connection
		}
		if req.Type == cmdDisc {
			c.log.Debug().Msg("nbd NBD_CMD_DISC")
			return nil
		}
		if err := c.accept(req); err != nil {
			if c.stopping.Load() {
				return nil
			}
			return err
		}
	}
}

// accept takes a request whose header has been read: it reads a WRITE
// payload, and either queues an error reply or starts a worker.
func (c *conn) accept(req request) error {
	errno := c.geo.check(req)
	var cost int64
	if errno == 0 && (req.Type == cmdRead || req.Type == cmdWrite) {
		cost = int64(req.Length)
	}
	// Wait for a request slot and for the payload bytes before reading the
	// payload or allocating its buffer: this is the backpressure that
	// bounds memory and in-flight requests.
	if !c.budget.tryAcquire() {
		c.endBatch()
		if !c.budget.acquire(c.stopCh) {
			return errStopped
		}
	}
	if !c.srv.bytes.tryAcquire(cost) {
		c.endBatch()
		if !c.srv.bytes.acquire(cost, c.stopCh) {
			c.budget.release()
			return errStopped
		}
	}
	if req.hasPayload() && c.br.Buffered() < int(req.Length) {
		c.endBatch() // reading the payload may wait
	}
	if errno != 0 {
		if req.hasPayload() {
			// Stay in step with the stream: consume and drop the payload.
			err := c.readPayload(req, func() error {
				_, err := io.CopyN(io.Discard, c.br, int64(req.Length))
				return err
			})
			if err != nil {
				c.budget.release()
				return fmt.Errorf("skip payload of rejected write: %w", err)
			}
		}
		c.log.Debug().Uint16("type", req.Type).Uint64("offset", req.Offset).
			Uint32("length", req.Length).Uint32("errno", errno).Msg("nbd request rejected")
		c.queueReply(reply{handle: req.Handle, errno: errno})
		return nil
	}
	var buf *[]byte
	if req.hasPayload() {
		err := c.readPayload(req, func() error {
			// Allocate only once the payload has started to arrive.
			if _, err := c.br.Peek(1); err != nil {
				return err
			}
			buf = getBuf(int(req.Length))
			_, err := io.ReadFull(c.br, *buf)
			return err
		})
		if err != nil {
			putBuf(buf)
			c.srv.bytes.release(cost)
			c.budget.release()
			return fmt.Errorf("read write payload: %w", err)
		}
	} else if cost > 0 {
		buf = getBuf(int(req.Length))
	}
	if c.async != nil && cost > 0 {
		c.startAsync(req, buf, cost)
		return nil
	}
	c.workers.Add(1)
	j := job{req: req, buf: buf, cost: cost}
	select {
	case c.jobs <- j: // an idle worker takes it
	default:
		go c.worker(j) // owned by the connection: transmit waits, then closes jobs
	}
	return nil
}

// readPayload runs read, which consumes req's payload, with IOTimeout as
// the longest the client may pause while sending it: every socket read in
// the payload gets a fresh deadline (stallConn.Read). A client that
// announced a payload must keep sending it; a slow one is not dropped.
func (c *conn) readPayload(req request, read func() error) error {
	if c.stopping.Load() {
		return errStopped
	}
	c.sc.inPayload = true
	err := read()
	c.sc.inPayload = false
	if c.sc.armed {
		c.sc.armed = false
		c.nc.SetReadDeadline(time.Time{}) // readRequests checks the flag next
	}
	if err != nil && !c.stopping.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("payload of %d bytes (handle %d) stalled: nothing received for %v: %w",
			req.Length, req.Handle, c.srv.opts.IOTimeout, err)
	}
	return err
}

// job is one accepted request for a worker.
type job struct {
	req  request
	buf  *[]byte
	cost int64
}

// worker runs j, then stays for more until transmit closes c.jobs. Workers
// live as long as the connection, so their stacks, grown once through the
// backend's call chain, are not grown again for every request.
func (c *conn) worker(j job) {
	for ok := true; ok; j, ok = <-c.jobs {
		c.work(j.req, j.buf, j.cost)
	}
}

var errStopped = errors.New("connection stopping")

// work executes one request on the Backend and queues its reply.
func (c *conn) work(req request, buf *[]byte, cost int64) {
	defer c.workers.Done()
	err := c.execute(req, buf)
	r := reply{handle: req.Handle, buf: buf, cost: cost}
	if err != nil {
		r.errno = errnoOf(err, c.stopping.Load() || c.ctx.Err() != nil)
		c.log.Warn().Err(err).Uint16("type", req.Type).Uint64("offset", req.Offset).
			Uint32("length", req.Length).Uint32("errno", r.errno).Msg("nbd backend error")
	} else if req.Type == cmdRead {
		r.data = *buf
	}
	c.queueReply(r)
}

// asyncReq is a READ or WRITE started through the export's
// blockdev.Async, until its IODone; kept on a free list.
type asyncReq struct {
	c    *conn
	req  request
	buf  *[]byte
	cost int64
}

var asyncReqs freelist.List[asyncReq]

// startAsync starts a checked READ or WRITE on the backend's
// blockdev.Async, from the reader; its reply is queued by IODone.
func (c *conn) startAsync(req request, buf *[]byte, cost int64) {
	x := asyncReqs.Get()
	x.c, x.req, x.buf, x.cost = c, req, buf, cost
	c.asyncMu.Lock()
	if c.asyncs == nil {
		c.asyncs = make(map[*asyncReq]struct{})
	}
	c.asyncs[x] = struct{}{}
	c.asyncMu.Unlock()
	c.asyncWG.Add(1)
	c.beginBatch()
	if req.Type == cmdWrite {
		c.async.StartWrite(*buf, int64(req.Offset), req.Flags&cmdFlagFUA != 0, x, 0)
	} else {
		c.async.StartRead(*buf, int64(req.Offset), x, 0)
	}
}

// testIODoneGap, when set by a test, runs in IODone once the request's
// result is known, before it is handed to the writer. Atomic: late
// IODones of an earlier test may still run when a test sets it.
var testIODoneGap atomic.Pointer[func()]

// IODone implements blockdev.Done: the request's reply goes to the writer,
// unless waitAsync has already answered it. Which of the two answers is
// decided in one locked section with the request's removal: a request
// waitAsync finds in asyncs is answered by it, one it does not find has
// had its reply queued, so every request gets exactly one reply, and none
// after closeReplies.
func (x *asyncReq) IODone(_ uint32, err error) {
	c, req := x.c, x.req
	r := reply{handle: req.Handle, buf: x.buf, cost: x.cost}
	if err != nil {
		op := "read"
		if req.Type == cmdWrite {
			op = "write"
		}
		err = fmt.Errorf("%s %d bytes at %d: %w", op, req.Length, req.Offset, err)
		r.errno = errnoOf(err, c.stopping.Load() || c.ctx.Err() != nil)
		c.log.Warn().Err(err).Uint16("type", req.Type).Uint64("offset", req.Offset).
			Uint32("length", req.Length).Uint32("errno", r.errno).Msg("nbd backend error")
	} else if req.Type == cmdRead {
		r.data = *r.buf
	}
	if gap := testIODoneGap.Load(); gap != nil {
		(*gap)()
	}
	c.asyncMu.Lock()
	delete(c.asyncs, x)
	answered := c.abandoned
	if !answered {
		c.queueReply(r) // never blocks: its budget slot is held
	}
	c.asyncMu.Unlock()
	*x = asyncReq{}
	asyncReqs.Put(x)
	if answered {
		// waitAsync answered it ESHUTDOWN when the server stopped: only
		// the buffer and the server-wide bytes are left to give back.
		putBuf(r.buf)
		c.srv.bytes.release(r.cost)
	}
	c.asyncWG.Done()
}

// waitAsync waits for the asynchronous requests in flight to end, until
// the connection's context ends (Close, or Serve's context): those still
// running are then answered ESHUTDOWN at once, as a blocking backend call
// whose context ended would be. A backend cannot take an asynchronous
// request back (a LUN's ends within its command timeout, or when its
// Nexus gives up), so its late IODone only releases its buffer.
func (c *conn) waitAsync() {
	idle := make(chan struct{})
	go func() { // ends with the last IODone, possibly after the connection
		c.asyncWG.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return
	case <-c.ctx.Done():
	}
	c.asyncMu.Lock()
	defer c.asyncMu.Unlock()
	c.abandoned = true
	for x := range c.asyncs {
		c.queueReply(reply{handle: x.req.Handle, errno: errShutdown})
	}
}

// execute performs a checked request, splitting READ and WRITE into
// Backend calls of at most geometry.chunk bytes.
func (c *conn) execute(req request, buf *[]byte) error {
	b := c.exp.Backend
	fua := req.Flags&cmdFlagFUA != 0
	off := int64(req.Offset)
	switch req.Type {
	case cmdRead:
		return blockdev.Split(*buf, off, int(c.geo.chunk), func(p []byte, off int64) error {
			if err := b.ReadAt(c.ctx, p, off); err != nil {
				return fmt.Errorf("read %d bytes at %d: %w", len(p), off, err)
			}
			return nil
		})
	case cmdWrite:
		return blockdev.Split(*buf, off, int(c.geo.chunk), func(p []byte, off int64) error {
			if err := b.WriteAt(c.ctx, p, off, fua); err != nil {
				return fmt.Errorf("write %d bytes at %d: %w", len(p), off, err)
			}
			return nil
		})
	case cmdFlush:
		if err := b.Flush(c.ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		return nil
	case cmdTrim:
		if err := b.Trim(c.ctx, off, int64(req.Length)); err != nil {
			return fmt.Errorf("trim %d bytes at %d: %w", req.Length, off, err)
		}
		if fua {
			// Trim has no FUA of its own; a flush makes it stable.
			if err := b.Flush(c.ctx); err != nil {
				return fmt.Errorf("flush after trim: %w", err)
			}
		}
		return nil
	case cmdWriteZeroes:
		mayUnmap := req.Flags&cmdFlagNoHole == 0
		if err := b.WriteZeroes(c.ctx, off, int64(req.Length), mayUnmap, fua); err != nil {
			return fmt.Errorf("write zeroes %d bytes at %d: %w", req.Length, off, err)
		}
		return nil
	}
	// check lets no other type through.
	return fmt.Errorf("execute: unexpected request type %d", req.Type)
}

// writeReplies is the writer loop: the only goroutine that writes to the
// socket in the transmission phase. It batches replies in the bufio.Writer
// and flushes whenever the queue is empty. The client must keep taking the
// replies: each writeChunk of them must reach the socket within IOTimeout
// (stallConn.Write). After a write error it keeps
// draining the queue (recycling buffers, returning budget) so workers never
// block, and stops the reader.
func (c *conn) writeReplies() error {
	var werr error
	var hdr [replyHeaderLen]byte
	c.sc.paced = true // this goroutine is now the only writer
	if c.rs != nil {
		defer c.rs.release()
	}
	for {
		r, ok := c.nextReply()
		if !ok {
			break
		}
		if werr == nil {
			putSimpleReply(hdr[:], r.errno, r.handle)
			_, werr = c.bw.Write(hdr[:])
			if werr == nil && r.errno == 0 && len(r.data) > 0 {
				_, werr = c.bw.Write(r.data)
			}
			if werr == nil && len(c.replies) == 0 {
				werr = c.bw.Flush()
			}
			if werr != nil {
				if errors.Is(werr, os.ErrDeadlineExceeded) && !c.stopping.Load() {
					werr = fmt.Errorf("client stopped taking replies: under %d KiB taken in %v: %w",
						writeChunk>>10, c.srv.opts.IOTimeout, werr)
				}
				werr = fmt.Errorf("write reply: %w", werr)
				c.stopReading()
			}
		}
		putBuf(r.buf)
		c.srv.bytes.release(r.cost)
		c.budget.release()
	}
	if werr == nil {
		if werr = c.bw.Flush(); werr != nil {
			werr = fmt.Errorf("write reply: %w", werr)
		}
	}
	if werr != nil && c.stopping.Load() && clientGone(werr) {
		// The write deadline of Close, or a client that left: expected.
		c.log.Debug().Err(werr).Dur("grace", closeWriteGrace).Msg("nbd replies dropped")
		return nil
	}
	return werr
}

// queueReply hands r to the writer. It never blocks: r holds a budget slot
// (or, for the ESHUTDOWN answers of waitAsync, its request's).
func (c *conn) queueReply(r reply) {
	c.replies <- r
	if c.rs != nil {
		c.rs.queued.Add(1)
		c.rs.wake()
	}
}

// closeReplies ends the writer once it has sent what is queued.
func (c *conn) closeReplies() {
	close(c.replies)
	if c.rs != nil {
		c.rs.queued.Add(1)
		c.rs.wake()
	}
}

// nextReply returns the next reply to send, waiting for one; false once
// the queue is closed and empty. A writer that reaps the backend's
// completions (reaper) runs them while it waits.
func (c *conn) nextReply() (reply, bool) {
	rs := c.rs
	for {
		select {
		case r, ok := <-c.replies:
			if ok && rs != nil {
				rs.queued.Add(-1)
			}
			return r, ok
		default:
		}
		// Nothing queued, and all written: the writer flushes whenever
		// it finds the queue empty.
		if rs == nil || !rs.wait() {
			r, ok := <-c.replies
			if ok && rs != nil {
				rs.queued.Add(-1)
			}
			return r, ok
		}
	}
}
