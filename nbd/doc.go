// Package nbd is the NBD export server: it serves Backends (LUNs reached
// over iSCSI/iSER) to NBD clients such as the Linux nbd driver, qemu, libnbd
// (nbdinfo, nbdcopy, nbdfuse) and fio's nbd engine.
//
// # Protocol
//
// The server speaks the NBD protocol as specified in the NetworkBlockDevice
// project's doc/proto.md:
//
//   - fixed newstyle handshake with NBD_FLAG_NO_ZEROES; options
//     NBD_OPT_GO, NBD_OPT_INFO, NBD_OPT_LIST, NBD_OPT_EXPORT_NAME and
//     NBD_OPT_ABORT. Every other option (NBD_OPT_STARTTLS,
//     NBD_OPT_STRUCTURED_REPLY, metadata contexts, extended headers, unknown
//     ones) gets NBD_REP_ERR_UNSUP, so transmission uses simple replies.
//   - NBD_OPT_INFO/GO reply NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE always,
//     NBD_INFO_NAME and NBD_INFO_DESCRIPTION on request. The minimum block
//     size is Backend.BlockSize, the preferred one Backend.PreferredBlockSize
//     (a power of two of at least 512), the maximum 32 MiB.
//   - transmission flags HAS_FLAGS, SEND_FLUSH, SEND_FUA, CAN_MULTI_CONN,
//     and READ_ONLY (when the Backend reports it, or Export.ReadOnly), or
//     SEND_TRIM and SEND_WRITE_ZEROES as the Backend reports.
//   - commands NBD_CMD_READ, WRITE (with FUA), FLUSH, TRIM (FUA is a flush
//     after the trim), WRITE_ZEROES (NBD_CMD_FLAG_NO_HOLE means
//     mayUnmap=false) and DISC. NBD_CMD_CACHE and the structured-reply-only
//     commands get EINVAL.
//
// Every request is checked before it reaches the Backend (see
// geometry.check): a READ/TRIM past the end, an offset+length that
// overflows, a misaligned offset or length, a zero length, unknown flags and
// READ/WRITE larger than 32 MiB get EINVAL; a WRITE/WRITE_ZEROES past the
// end gets ENOSPC; any write to a read-only export gets EPERM. The payload of
// a rejected WRITE is read and dropped so the stream stays in step. Backend
// errors become NBD errors as described on Backend; a cancelled call during
// shutdown becomes ESHUTDOWN. Only a broken stream (bad request magic, bad
// option magic, unknown client flags, unknown export in
// NBD_OPT_EXPORT_NAME) drops the connection.
//
// # Goroutines and their owners
//
// Serve runs on the caller's goroutine and owns one goroutine per accepted
// connection (also tracked by the Server, for Close). A connection's
// goroutine is its reader: it does the handshake, then reads requests. In
// the transmission phase it owns
//
//   - one writer goroutine, the only writer to the socket, which sends the
//     replies in completion order (out of order with respect to requests)
//     and flushes when its queue is empty; when the backend hands its
//     completions over (blockdev.Reaping), the writer reaps them itself
//     while it waits, and gives them back before it waits for a client
//     slow to take its replies (reap.go); and
//   - one worker goroutine per request in flight, which calls the Backend
//     (splitting READ/WRITE into Backend.MaxTransfer pieces) and queues the
//     reply.
//
// The reader takes a slot from a per-connection budget of
// Options.MaxInFlight requests, and the request's payload bytes from a
// server-wide budget of Options.MaxInFlightBytes, before it allocates a
// buffer, reads a WRITE payload or starts a worker; the writer returns both
// once the reply is on the wire. A full budget therefore stops the reader,
// and TCP flow control pushes back on the client.
//
// # Limits against hostile or broken clients
//
// NBD has no authentication, so whoever can connect can also try to pin
// the server's memory. Serve keeps at most Options.MaxConns connections and
// closes any further one at once (one warning each). The handshake must end
// within Options.HandshakeTimeout. In the transmission phase an idle
// connection may wait for ever, but once a WRITE header has arrived its
// payload must keep arriving with no pause as long as Options.IOTimeout,
// and the client must keep taking replies (128 KiB per IOTimeout at
// least); a slow client that keeps making progress is not dropped, one
// that stalls is closed. With
// payload bytes bounded server-wide, the memory held for requests never
// exceeds MaxInFlightBytes however many clients send large headers.
//
// # Shutdown order
//
// A connection ends the same way whatever the cause (NBD_CMD_DISC, client
// hang-up, protocol error, write error, Shutdown, Close):
//
//  1. the reader stops (Shutdown and Close set a past read deadline);
//  2. the reader waits for its workers, so every request it read is answered;
//  3. it closes the reply queue; the writer sends what is queued, flushes
//     and exits;
//  4. the socket is closed.
//
// Server.Shutdown closes the listeners, does step 1 for every connection and
// waits. Server.Close additionally cancels the context passed to the
// Backend, so in-flight calls return early (answered with ESHUTDOWN),
// answers asynchronous requests (blockdev.Async) still in the backend
// ESHUTDOWN at once (each request gets exactly one reply: its result if it
// ended before, else ESHUTDOWN; its late end only frees its buffer), and
// gives the writer one second to deliver before its writes fail; then it
// waits for every connection goroutine. Cancelling the ctx given to Serve
// does what Shutdown does, for that listener and its connections only (it
// does not cancel Backend calls). Close and Shutdown are idempotent.
package nbd
