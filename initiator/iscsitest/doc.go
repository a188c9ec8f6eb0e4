// Package iscsitest is a scriptable fake iSCSI target for unit tests of the
// initiator: a function from request PDUs to reply PDUs, on one end of a
// connection (usually net.Pipe), after mdlayher/netlink's nltest. It speaks
// iSCSI/TCP framing without digests.
//
// It is for protocol corners (malformed PDUs, rejects, out-of-window
// sequence numbers, target-initiated logout); real data paths are tested
// against tgtd and LIO.
package iscsitest
