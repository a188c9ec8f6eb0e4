// Package nbdkernel attaches exports of an nbd.Server as Linux block
// devices, /dev/nbdN, through the nbd driver's generic netlink family
// ("nbd", include/uapi/linux/nbd-netlink.h), using the
// vishvananda/netlink nl package for family resolution, requests and
// attributes.
//
// Unlike the ioctl interface (NBD_SET_SOCK, NBD_DO_IT), netlink hands the
// driver every socket and the export's transmission flags at once, so
// NBD_FLAG_SEND_FLUSH, SEND_FUA, SEND_TRIM, SEND_WRITE_ZEROES and
// CAN_MULTI_CONN reach the driver: fsync becomes NBD_CMD_FLUSH, O_DSYNC and
// journal writes carry NBD_CMD_FLAG_FUA, discard becomes NBD_CMD_TRIM, and
// the device gets one hardware queue per socket.
//
// # Attach
//
// Attach creates Options.Connections Unix socket pairs. The server end of
// each is served in the transmission phase by nbd.Server.ServeTransmission
// (the driver never negotiates); the other ends go to the driver in
// NBD_CMD_CONNECT with NBD_ATTR_SIZE_BYTES, NBD_ATTR_BLOCK_SIZE_BYTES,
// NBD_ATTR_SERVER_FLAGS (from nbd.Server.ExportInfo), NBD_ATTR_SOCKETS and
// optionally NBD_ATTR_INDEX, NBD_ATTR_TIMEOUT, NBD_ATTR_DEAD_CONN_TIMEOUT
// and NBD_ATTR_BACKEND_IDENTIFIER. The reply names the device index.
// Attach closes its copies of the kernel ends afterwards; the driver holds
// its own references.
//
// # Goroutines and their owners
//
// A Device owns one goroutine per socket, each running ServeTransmission
// (which in turn owns its writer and per-request workers, see package nbd),
// plus one that waits for them and closes Done. They end when the driver
// disconnects (NBD_CMD_DISC, then socket shutdown), when the server is
// closed, or when Detach gives up waiting and closes the server ends.
// Detach starts one short-lived goroutine for the sync and always collects
// it before returning.
//
// # Detach order
//
//  1. sync: open the device, fsync (dirty pages written, NBD_CMD_FLUSH sent),
//     close;
//  2. NBD_CMD_DISCONNECT: the driver sends NBD_CMD_DISC on each socket,
//     shuts the sockets down and fails I/O still queued;
//  3. wait for every connection goroutine (Done closes);
//  4. poll NBD_CMD_STATUS until the device has no configuration, so its size
//     is 0 and the index is free again.
//
// Close runs Detach with a 30 s bound; both are idempotent.
//
// # Seams
//
// The netlink side goes through a small transport interface: the real one
// opens a NETLINK_GENERIC socket per request; the tests use a fake driver
// that parses the same bytes and drives the sockets as the kernel would.
// The VM lab (scripts/vmlab/tests/71-nbd-kernel.sh) runs the package's
// TestLab* tests against the real driver of Linux 6.12.
package nbdkernel
