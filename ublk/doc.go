// Package ublk serves a Backend (an iSCSI/iSER LUN) as a Linux block device
// through ublk_drv: /dev/ublkbN is the disk, /dev/ublkcN the channel this
// process serves it on. It speaks the ublk user ABI of
// include/uapi/linux/ublk_cmd.h (Linux 6.12, and 7.x's batch I/O and
// features) over its own small io_uring
// (uring.go): pure Go, no cgo, ioctl-encoded commands (UBLK_U_CMD_*,
// UBLK_U_IO_*) in IORING_OP_URING_CMD SQEs.
//
// # Control
//
// Control commands go to /dev/ublk-control on a private ring with 128-byte
// SQEs (the 32-byte ublksrv_ctrl_cmd does not fit a 64-byte one), one at a
// time, each waiting for its own completion in 100 ms slices so a context can
// end the wait. Create runs GET_FEATURES, ADD_DEV, SET_PARAMS, starts the
// queues (their FETCH_REQs must be in before START_DEV completes: the kernel
// reads the partition table through them), then START_DEV. Recover runs
// GET_DEV_INFO and GET_PARAMS (the backend must match the device's size and
// block size), START_USER_RECOVERY (retried while the old server still holds
// /dev/ublkcN), starts the queues, then END_USER_RECOVERY.
//
// Parameters: logical block size from Backend.BlockSize, physical block
// size and io_min from PreferredBlockSize (at most a page), io_opt from
// PreferredBlockSize, max_sectors from DeviceOptions.MaxIOBytes (512 KiB, the
// largest iSER transfer) capped by Backend.MaxTransfer, discard and
// write-zeroes limits when the backend can trim / write zeroes,
// UBLK_ATTR_VOLATILE_CACHE and UBLK_ATTR_FUA from DeviceOptions, read-only
// when either side says so.
//
// # Data path and goroutines
//
// Each hardware queue has one goroutine (queue.run) locked to its OS thread
// for life: ublk_drv binds a queue to the task that sent its first
// FETCH_REQ, accepts later commands only from it, and runs its completions
// as task work on it. That goroutine owns the queue's ring (64-byte SQEs,
// depth+1 entries), sends FETCH_REQ for every tag, and waits in
// io_uring_enter. A completed FETCH hands a request (ublksrv_io_desc in the
// read-only mapping of the driver's descriptor array) to a new goroutine
// owned by the queue (a WaitGroup; at most QueueDepth at a time), which
// calls the Backend on the tag's buffer. Its result comes back through a
// locked list and an eventfd the ring polls (IORING_OP_POLL_ADD); the queue
// goroutine then sends COMMIT_AND_FETCH_REQ with it.
//
// Batch I/O (UBLK_F_BATCH_IO, Linux >= 7.0; batch.go), which Create asks
// for where the driver offers it (DeviceOptions.NoBatch: not): the tags come
// and go through three per-queue commands instead. Once, before START_DEV
// (or END_USER_RECOVERY), PREP_IO_CMDS hands the driver every tag with its
// buffer. Two multishot FETCH_IO_CMDS are armed, fed by a provided-buffer
// ring (pbuf.go): each completion is a buffer of up to 128 tags whose
// descriptors and write data are in place, served as above. The results of
// one pass of the loop leave in one COMMIT_IO_CMDS, each element carrying
// its tag's buffer for the next request. The driver ends the waiting FETCH
// with UBLK_IO_RES_ABORT when it cancels the queue (STOP_DEV): the loop
// then knows it holds no tag. Recovery follows the device's flags: a device
// keeps the protocol it was created with.
//
// Buffers: one per tag, MaxIOBytes long. The kernel copies write data into
// it before the request is fetched and read data out of it on commit. A
// Backend that is a blockdev.BufferProvider (found with blockdev.As,
// through wrappers) supplies them (the iSER datamover's registered pool:
// the target's RDMA moves the data with no copy in user space); otherwise,
// or when it gives none, they come from one anonymous mapping per queue.
//
// Requests: READ and WRITE (the FUA flag kept) map to ReadAt and WriteAt,
// split at MaxTransfer; FLUSH to Flush; DISCARD to Trim; WRITE_ZEROES to
// WriteZeroes (UBLK_IO_F_NOUNMAP clears mayUnmap); anything else fails with
// EOPNOTSUPP. A Backend error completes the request with its errno where
// the block layer has a status for it, else EIO; a read never completes
// short or zero-filled.
//
// A Device owns one more goroutine (watch) that closes Done when every
// queue goroutine has ended.
//
// # Shutdown order
//
// Stop (and Close, which is Stop with a 30 s limit) removes the device:
// STOP_DEV (the kernel drains the I/O in flight through us, deletes the
// disk and aborts every FETCH with UBLK_IO_RES_ABORT, which ends the queue
// goroutines), then the queue goroutines are told to quit anyway after 2 s,
// their workers waited for, buffers, descriptor mappings, eventfds and
// /dev/ublkcN released, and only then DEL_DEV (the driver waits for the last
// reference to the channel). When Stop's context ends first the backend
// calls still running are cancelled.
//
// Detach ends the queue goroutines without STOP_DEV: workers are waited for
// and their results dropped, the rings closed (the driver cancels our
// FETCHes and, with UBLK_F_USER_RECOVERY, quiesces the disk: new I/O waits
// in the kernel), /dev/ublkcN closed. The device stays for Recover.
// Close, Stop and Detach are idempotent: the first call decides.
//
// # Recovery model
//
// Devices are created with UBLK_F_USER_RECOVERY and
// UBLK_F_USER_RECOVERY_REISSUE unless DeviceOptions.NoRecovery. When the
// serving process dies (SIGKILL included) or detaches, the kernel keeps
// /dev/ublkbN, holds new I/O and requeues the requests the dead server had
// fetched but not committed. Recover, in any process, reattaches a Backend
// for the same disk and the held and requeued requests are served: a
// mounted filesystem and the I/O in flight carry on. Remove deletes a device
// nobody will recover (its held I/O fails).
//
// # Kernel support
//
// Supported (and Create, Recover, Remove) return a *KernelError naming what
// is missing and the first Linux release with it: ublk_drv (6.0; "try:
// modprobe ublk_drv"), io_uring SQE128 (5.19), GET_FEATURES (6.5), the
// recovery and ioctl-encoding features. Debian's 6.12 kernel has them all;
// the VM lab (scripts/vmlab/tests/70-ublk.sh) runs the lab tests there.
package ublk
