package nbd

import "github.com/iser-attach/iser-attach/blockdev"

// Backend is the block device an export serves: the frontends' shared
// contract (blockdev.Backend, which says how it is called and how its
// errors map to errnos). The server answers a failed request with the
// NBD error its errno narrows to (errnoOf).
//
// A Backend that also implements blockdev.Async (initiator.LUN) gets READ
// and WRITE through it: the connection's reader starts them, with no
// worker goroutine, and the backend splits them at its own MaxTransfer.
// Those cannot be cancelled: Shutdown waits for their IODone, Close
// answers them ESHUTDOWN at once and lets their late IODone only give
// the buffer back.
type Backend = blockdev.Backend
