package initiator

import "golang.org/x/sys/unix"

// This file holds the iSCSI/TCP datamover's inline writes: commands are
// queued under the session's lock (SendCommand) and written by the
// session's Kick after it, on the goroutine that started them (a ublk
// loop, an NBD reader), as far as the socket takes them without waiting;
// what it does not take goes to the writer goroutine, which may wait. A
// batch (Plug, Unplug) writes all its commands with one writev. Control
// PDUs (SendPDU) and R2T answers go through the writer goroutine: their
// senders must not block, and none of them kicks.

// Kick implements kicker: it writes what is queued, unless a batch is
// open, the writer goroutine or another Kick is writing (which then
// writes it), or the datamover is closing. A write error surfaces
// through the writer goroutine (and so on the next send and Recv).
func (d *TCPDatamover) Kick() error {
	d.mu.Lock()
	bufs := d.takeLocked()
	d.mu.Unlock()
	d.writeInline(bufs)
	return nil
}

// Plug implements plugger: Kick writes nothing until the matching Unplug.
func (d *TCPDatamover) Plug() {
	d.mu.Lock()
	d.plugs++
	d.mu.Unlock()
}

// Unplug implements plugger: it writes what the batch, and any other
// held back meanwhile, queued.
func (d *TCPDatamover) Unplug() {
	d.mu.Lock()
	d.plugs--
	bufs := d.takeLocked()
	d.mu.Unlock()
	d.writeInline(bufs)
}

// callWriterLocked asks the writer goroutine to write what is queued.
func (d *TCPDatamover) callWriterLocked() {
	d.called = true
	d.wake.Signal()
}

// takeLocked takes the queue for an inline write, when one may start now.
func (d *TCPDatamover) takeLocked() [][]byte {
	if d.plugs > 0 || d.writing || d.closed || len(d.queue) == 0 {
		return nil
	}
	if d.raw == nil {
		d.callWriterLocked()
		return nil
	}
	bufs := d.queue
	d.queue, d.writing, d.inline = nil, true, true
	return bufs
}

// writeInline writes bufs, and what was queued meanwhile, without waiting;
// what the socket does not take goes back to the head of the queue for the
// writer goroutine.
func (d *TCPDatamover) writeInline(bufs [][]byte) {
	for bufs != nil {
		rest := d.writeNow(bufs)
		d.mu.Lock()
		if len(rest) > 0 {
			d.queue = append(rest, d.queue...)
			d.called = true
		} else if d.plugs == 0 && !d.closed && len(d.queue) > 0 {
			bufs = d.queue
			d.queue = nil
			d.mu.Unlock()
			continue
		}
		d.writing, d.inline = false, false
		if d.called {
			d.wake.Signal() // it waited for this write to end, or takes the rest
		}
		d.written.Broadcast() // TaskDone or Close may wait (cheap when none does)
		d.mu.Unlock()
		return
	}
}

// iovMax is the most buffers one writev takes (IOV_MAX).
const iovMax = 1024

// writeNow writes what of bufs the socket takes at once and returns the
// rest (all of it on any error: the writer goroutine meets it again).
func (d *TCPDatamover) writeNow(bufs [][]byte) [][]byte {
	_ = d.raw.Write(func(fd uintptr) bool {
		for len(bufs) > 0 {
			n, err := unix.Writev(int(fd), bufs[:min(len(bufs), iovMax)])
			if err == unix.EINTR {
				continue
			}
			if err != nil || n <= 0 {
				break
			}
			bufs = consumed(bufs, n)
		}
		return true // never wait here
	})
	return bufs
}

// consumed drops the first n bytes of bufs.
func consumed(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}
