// Package tgttest runs a real tgtd (the Linux SCSI target framework,
// Debian's tgt 1.0.85) on 127.0.0.1 for integration tests, and tells a
// test what reached it.
//
// Start(t, targets...) picks a free iSCSI port and a free control port
// (tgtd -C N / tgtadm -C N, 0..32767, naming /var/run/tgtd/socket.N), so
// several servers run at once, each with its own targets, accounts and
// backing files under t.TempDir(). t.Cleanup stops it: targets are deleted
// with --force (live sessions are dropped), then "tgtadm --op delete --mode
// system"; tgtd ignores SIGTERM, so SIGKILL follows only if it has not
// exited within 5 s. The child also gets SIGKILL if the test binary dies
// (Pdeathsig). Launch is the same without testing.TB, for cmd/tgtlab.
//
// # LUN numbers
//
// tgt gives every target a LUN 0 of its own: the controller (peripheral
// device type 0x0c, no storage, "Backing store type: null"). Backing-store
// LUNs start at 1: Target.LUNs[i] is SCSI LUN i+1, LUNPath(iqn, i+1) its
// backing file. REPORT LUNS lists 0..len(LUNs). Targets get tid 1, 2, ...
// in the order given.
//
// # Seeing what reached the target
//
// Start runs tgtd with -d 1 (Config.Trace) and parses its debug log:
// target_cmd_queue lines give each command's opcode and LUN, bs_rdwr "io
// done" / "io error" lines whether the backing store carried it out
// (pwrite, fdatasync for SYNCHRONIZE CACHE, fallocate PUNCH_HOLE for UNMAP
// and WRITE SAME with UNMAP). After the initiator has its responses, call
// Sync, then Commands(lun, OpUnmap) and friends. Counts are per LUN number
// over all targets of a Server. A command refused with CHECK CONDITION is
// Queued but never Done. The backing file is the second witness:
// LUNPath plus DataExtents (SEEK_DATA/SEEK_HOLE) or AllocatedBytes show
// whether a trim deallocated anything, and plain reads of the file check
// data without going through any initiator.
//
// # Faults
//
// For session recovery tests: Restart(ctx, down) crashes tgtd (SIGKILL),
// keeps the portal closed for down, and starts a new tgtd on the same iSCSI
// and control ports with the same targets and backing files (data stays,
// sessions do not). Stall(ctx, d) freezes tgtd (SIGSTOP/SIGCONT): a hung
// target that only keepalives notice. DropConnections(ctx, iqn) closes
// every connection of a target's sessions with tgtadm --mode connection
// --op delete (tgt closes the TCP connection; no Async Message).
// Sessions reports each session's ISID, from tgtd's debug log, so a test
// can check that a reinstating login reused it.
//
// # What tgt 1.0.85 does
//
// Checked by this package's tests with qemu-io (through libiscsi) and with
// libiscsi-bin's tools as initiators:
//
//   - One-way CHAP (tgtadm --mode account --op new, then bind --tid):
//     works; a wrong or missing secret fails the login with Authentication
//     failure (status 0x0201).
//   - Mutual CHAP (an account bound with --outgoing; one per target):
//     works when the initiator asks for it (CHAP_I/CHAP_C in its
//     CHAP_R step); a wrong target secret is caught by the initiator.
//     tgt does not require it: an initiator that does not ask logs in with
//     one-way CHAP. An initiator asking for mutual CHAP from a target that
//     has no outgoing account gets Authentication failure.
//   - 4096-byte logical blocks (--blocksize 4096 on logicalunit new):
//     READ CAPACITY(16) reports 4096 and LBAs address 4 KiB.
//   - A sparse LUN over 2 TiB (3 TiB tested): works; initiators must use
//     16-byte CDBs (READ/WRITE(16), WRITE SAME(16)) past 2^32 blocks.
//   - Thin provisioning (--params thin_provisioning=1 on logicalunit
//     update): READ CAPACITY(16) then reports LBPME=1 and LBPRZ=1 (0 and 0
//     without it), and
//     UNMAP and WRITE SAME(10/16) with the UNMAP bit punch holes in the
//     backing file. Without it tgt answers UNMAP with ILLEGAL REQUEST /
//     INVALID COMMAND OPERATION CODE (usr/sbc.c), and WRITE SAME with
//     UNMAP writes zeroes (the range stays allocated).
//   - Write protect (--params readonly=1): WP is set in MODE SENSE and
//     writes fail with DATA PROTECT / WRITE PROTECTED; qemu refuses a
//     read-write open.
//   - SYNCHRONIZE CACHE(10/16) is an fdatasync of the backing file.
//   - The TSIH goes into the Login Response in host byte order
//     (usr/iscsi/iscsid.c: rsp->tsih = conn->tsih): on x86 an initiator
//     reads I_T nexus 1 as TSIH 256. It is opaque and echoed back as
//     received, so logins work; Session.WireTSIH converts.
//   - A login with TSIH 0 and the ISID of a live session reinstates it:
//     tgt closes the old session's connections (usr/iscsi/iscsid.c,
//     login_security_done); the old session goes once its tasks are done.
//   - If tgtd cannot bind the --iscsi portal it does not exit: it serves
//     0.0.0.0:3260 instead. Launch checks "--mode portal --op show" and
//     retries on another port. tgtd also tries iSER at start and logs
//     "Failed to initialize RDMA" on hosts without RDMA; that is harmless.
//
// tgtd needs root. Missing programs fail the test with the package to
// install: tgt for this package; the tests also use qemu-io (qemu-utils,
// qemu-block-extra) and iscsi-readcapacity16 (libiscsi-bin).
package tgttest
