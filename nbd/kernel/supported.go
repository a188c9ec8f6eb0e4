package nbdkernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrNotSupported matches (errors.Is) every *UnsupportedError.
var ErrNotSupported = errors.New("kernel nbd driver not available")

// UnsupportedError says the running kernel cannot attach NBD devices: the
// nbd module is not loaded (or not built), so the "nbd" generic netlink
// family does not exist. Its message says how to fix the environment.
type UnsupportedError struct {
	// Kernel is the running kernel's release (uname -r).
	Kernel string
	// Err is what the kernel answered (ENOENT from CTRL_CMD_GETFAMILY).
	Err error
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("kernel nbd driver not available in %s: no %q generic netlink family (try: modprobe nbd; the driver needs Linux 4.12 or later for netlink): %v",
		e.Kernel, genlFamilyName, e.Err)
}

func (e *UnsupportedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrNotSupported }

func unsupported(err error) *UnsupportedError {
	return &UnsupportedError{Kernel: kernelRelease(), Err: err}
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "this kernel"
	}
	return strings.TrimSpace(string(b))
}

// Supported reports whether this kernel can attach NBD devices over
// generic netlink: nil, an *UnsupportedError (errors.Is ErrNotSupported)
// when the nbd module is missing, or the error that kept it from finding
// out. It needs no privileges; attaching needs CAP_SYS_ADMIN.
func Supported(ctx context.Context) error {
	_, err := dial(ctx, netlinkTransport{})
	return err
}
