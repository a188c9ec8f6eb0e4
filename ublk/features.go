package ublk

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"strings"

	"golang.org/x/sys/unix"
)

// Feature is one UBLK_F_* flag the driver may offer (GET_FEATURES), and
// what this package does with it and without it.
type Feature struct {
	Flag uint64
	Name string
	// With is how the flag is used when the kernel offers it; Without is
	// what happens when it does not.
	With, Without string
}

// KnownFeatures are the UBLK_F_* flags of include/uapi/linux/ublk_cmd.h, in
// bit order.
var KnownFeatures = []Feature{
	{FlagSupportZeroCopy, "UBLK_F_SUPPORT_ZERO_COPY", "not used: requests are copied to our buffers (iSER: registered memory)", "-"},
	{FlagURingCmdCompInTask, "UBLK_F_URING_CMD_COMP_IN_TASK", "not used (a driver debugging switch)", "-"},
	{FlagNeedGetData, "UBLK_F_NEED_GET_DATA", "not used: buffers are given at FETCH", "-"},
	{FlagUserRecovery, "UBLK_F_USER_RECOVERY", "used: a device outlives its server (takeover, recovery)", "required: ublk refused"},
	{FlagUserRecoveryReissue, "UBLK_F_USER_RECOVERY_REISSUE", "used: I/O in flight at a server's exit goes to the next", "required: ublk refused"},
	{FlagUnprivilegedDev, "UBLK_F_UNPRIVILEGED_DEV", "not used: iser-attach runs as root", "-"},
	{FlagCmdIoctlEncode, "UBLK_F_CMD_IOCTL_ENCODE", "used: every command is ioctl-encoded", "required: ublk refused"},
	{FlagUserCopy, "UBLK_F_USER_COPY", "not used: buffers are given at FETCH", "-"},
	{FlagZoned, "UBLK_F_ZONED", "not used: LUNs are not zoned", "-"},
	{FlagUserRecoveryFailIO, "UBLK_F_USER_RECOVERY_FAIL_IO", "not used: I/O waits for the next server (REISSUE)", "-"},
	{FlagUpdateSize, "UBLK_F_UPDATE_SIZE", "used: resize, and on UNIT ATTENTION 2A/09", "resize refused"},
	{FlagAutoBufReg, "UBLK_F_AUTO_BUF_REG", "not used", "-"},
	{FlagQuiesce, "UBLK_F_QUIESCE", "not used: takeover waits for the old server's exit", "-"},
	{FlagPerIODaemon, "UBLK_F_PER_IO_DAEMON", "not used: one thread serves a queue", "-"},
	{FlagBufRegOffDaemon, "UBLK_F_BUF_REG_OFF_DAEMON", "not used (no buffer registration)", "-"},
	{FlagBatchIO, "UBLK_F_BATCH_IO", "used: a queue's tags come in multishot FETCH_IO_CMDS and leave in one COMMIT_IO_CMDS per pass", "one FETCH_REQ and COMMIT_AND_FETCH_REQ per request"},
	{FlagIntegrity, "UBLK_F_INTEGRITY", "not used: no protection information", "-"},
	{FlagSafeStopDev, "UBLK_F_SAFE_STOP_DEV", "used: detach stops only an unopened device (TRY_STOP_DEV)", "detach relies on its own check for users"},
	{FlagNoAutoPartScan, "UBLK_F_NO_AUTO_PART_SCAN", "not used: the kernel scans partitions", "-"},
	{FlagShmemZC, "UBLK_F_SHMEM_ZC", "not used", "-"},
}

// KernelInfo is what the running kernel says about ublk: its release
// (uname -r) and GET_FEATURES, or why there is no answer.
type KernelInfo struct {
	Release  string
	Features uint64
	// Err is why Features is unknown (no /dev/ublk-control, no
	// GET_FEATURES) or lacks a required flag; nil when ublk is usable.
	Err error
	// Probed says GET_FEATURES answered (Features is the driver's).
	Probed bool
}

// Probe reads the kernel release and the driver's features. It never
// fails: what it could not learn is in Err.
func Probe(ctx context.Context) KernelInfo {
	k := KernelInfo{Release: kernelRelease()}
	c, err := openControl()
	if err != nil {
		k.Err = classifyOpenErr(err)
		return k
	}
	defer c.close()
	f, err := c.getFeatures(ctx)
	if err != nil {
		k.Err = classifyFeaturesErr(err)
		return k
	}
	k.Features, k.Probed, k.Err = f, true, checkFeatures(f)
	return k
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// WriteTable prints k as a table: the kernel, the GET_FEATURES mask, then
// one line per known flag: its name, whether the kernel offers it, and
// what iser-attach does with it (or without it).
func (k KernelInfo) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kernel: Linux %s\n", k.Release)
	if !k.Probed {
		fmt.Fprintf(&b, "ublk: no features known: %v\n", k.Err)
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "ublk: GET_FEATURES %#x", k.Features)
	if k.Err != nil {
		fmt.Fprintf(&b, " (unusable: %v)", k.Err)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  %-30s %-7s %s\n", "FEATURE", "OFFERED", "USE")
	var known uint64
	for _, f := range KnownFeatures {
		known |= f.Flag
		offered, use := "no", f.Without
		if k.Features&f.Flag != 0 {
			offered, use = "yes", f.With
		}
		fmt.Fprintf(&b, "  %-30s %-7s %s\n", f.Name, offered, use)
	}
	for rest := k.Features &^ known; rest != 0; rest &= rest - 1 {
		fmt.Fprintf(&b, "  %-30s %-7s %s\n", fmt.Sprintf("bit %d", bits.TrailingZeros64(rest)), "yes", "unknown to this build")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
