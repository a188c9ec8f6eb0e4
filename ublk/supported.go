package ublk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// KernelError says the running kernel lacks something ublk needs, and from
// which Linux version on it exists.
type KernelError struct {
	Feature    string // what is missing, e.g. "ublk_drv" or "UBLK_F_USER_RECOVERY_REISSUE"
	MinVersion string // the first Linux release that has it, e.g. "6.5"
	Err        error  // what was observed
}

func (e *KernelError) Error() string {
	s := fmt.Sprintf("ublk: kernel lacks %s (needs Linux >= %s)", e.Feature, e.MinVersion)
	if e.Feature == "ublk_drv" {
		s += "; try: modprobe ublk_drv"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *KernelError) Unwrap() error { return e.Err }

// requiredFeatureList names the UBLK_F_* flags this package requires, with the
// release that introduced each.
var requiredFeatureList = []struct {
	flag uint64
	name string
	min  string
}{
	{FlagUserRecovery, "UBLK_F_USER_RECOVERY", "6.0"},
	{FlagUserRecoveryReissue, "UBLK_F_USER_RECOVERY_REISSUE", "6.0"},
	{FlagCmdIoctlEncode, "UBLK_F_CMD_IOCTL_ENCODE", "6.3"},
}

// Supported reports whether this kernel can serve ublk devices the way this
// package does: ublk_drv loaded (/dev/ublk-control), io_uring with 128-byte
// SQEs and URING_CMD, UBLK_U_CMD_GET_FEATURES, and the features user
// recovery with reissue and ioctl-encoded commands. A missing piece is a
// *KernelError; not being allowed to open the control device (not root) is
// returned as the plain error.
func Supported() error {
	_, err := Features(context.Background())
	return err
}

// Features returns the UBLK_F_* flags the driver supports (GET_FEATURES),
// after the checks Supported makes.
func Features(ctx context.Context) (uint64, error) {
	c, err := openControl()
	if err != nil {
		return 0, classifyOpenErr(err)
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	f, err := c.getFeatures(ctx)
	if err != nil {
		return 0, classifyFeaturesErr(err)
	}
	return f, checkFeatures(f)
}

// classifyFeaturesErr: a driver without GET_FEATURES refuses the command.
func classifyFeaturesErr(err error) error {
	var ce *CmdError
	if errors.As(err, &ce) && (ce.Errno == syscall.EINVAL || ce.Errno == syscall.EOPNOTSUPP) {
		return &KernelError{Feature: "UBLK_U_CMD_GET_FEATURES", MinVersion: "6.5", Err: err}
	}
	return err
}

// checkFeatures names the first required UBLK_F_* flag missing from f.
func checkFeatures(f uint64) error {
	for _, r := range requiredFeatureList {
		if f&r.flag == 0 {
			return &KernelError{Feature: r.name, MinVersion: r.min,
				Err: fmt.Errorf("GET_FEATURES reported %#x", f)}
		}
	}
	return nil
}

// classifyOpenErr turns a failure to open /dev/ublk-control or to set up
// its ring into a *KernelError where the kernel is at fault.
func classifyOpenErr(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV):
		return &KernelError{Feature: "ublk_drv", MinVersion: "6.0", Err: err}
	case errors.Is(err, syscall.ENOSYS):
		return &KernelError{Feature: "io_uring", MinVersion: "5.1", Err: err}
	case errors.Is(err, syscall.EINVAL):
		// io_uring_setup refuses IORING_SETUP_SQE128 before 5.19.
		return &KernelError{Feature: "io_uring IORING_SETUP_SQE128", MinVersion: "5.19", Err: err}
	}
	return err
}
