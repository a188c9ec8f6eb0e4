// Package rdma is the project's only cgo package: thin bindings to
// librdmacm and libibverbs (rdma-core) for RDMA reliable connections, as an
// iSER initiator (Dial) and a test or fake target (Listen) use them.
//
// # Loading rdma-core
//
// The binary does not link rdma-core. libibverbs.so.1 and librdmacm.so.1 are
// opened with dlopen the first time an entry point needs them, so iser-attach
// starts, and works over iSCSI/TCP, on machines without them; the error then
// wraps ErrLibraryMissing and says what to install. Built with
// CGO_ENABLED=0, every entry point returns an error wrapping ErrNotSupported.
// The netlink helpers (Links, DeviceForAddr, AddSoftRoCE) are pure Go and
// work in both builds.
//
// # Memory
//
// No Go pointer is passed to C. Work requests and completions are copied
// through C memory each Conn owns; a batch of posts or one poll is one cgo
// call. Completions map back to the caller's work through the uint64 ID the
// caller chose (^uint64(0) is reserved). Registered memory comes from mmap,
// never the Go heap (RegisterMemory).
//
// # Concurrency
//
//   - Conn: PostSend may run in one goroutine, PostRecv in another and Poll
//     in a third at the same time; calls of the same method are serialized.
//     RegisterMemory, MemoryRegion.Close, Disconnect and Close are safe from
//     any goroutine. Close wakes a blocked Poll, which returns ErrClosed.
//   - Listener: Accept is serialized; Close wakes it (ErrClosed).
//   - Poll blocks on epoll over the completion channel, the CM event channel
//     and an eventfd that Close and context cancellation write; the package
//     starts no goroutines.
//
// # Teardown
//
// Disconnect (or the peer's disconnect, seen by Poll) calls rdma_disconnect,
// moves the QP to the error state and posts a marker on the send queue;
// every outstanding work request then completes with WCWRFlushErr, and Poll
// returns ErrDisconnected once the marker and every posted receive have
// completed. Only then may buffers of unfinished I/O be handed back: a late
// RDMA WRITE could otherwise land in them.
//
// Close does the same and waits (at most 5 s) for the flush, then destroys
// the QP (no DMA after this), deregisters and unmaps every MemoryRegion still
// open, and destroys the CQs, the completion channel, the PD, the CM id and
// its event channel. Close is idempotent.
package rdma
