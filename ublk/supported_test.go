package ublk

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// On a kernel without ublk_drv (the development host), Supported and Create
// fail with a *KernelError naming the module and the minimum version, and
// leak nothing. With the driver present, Supported must pass: the Debian 6.12
// guest kernel has everything.
func TestSupported(t *testing.T) {
	before := openFDs(t)
	err := Supported()
	_, statErr := os.Stat(ControlPath)
	if statErr != nil {
		var ke *KernelError
		if !errors.As(err, &ke) {
			t.Fatalf("Supported() = %v (%T), want *KernelError", err, err)
		}
		if ke.Feature != "ublk_drv" || ke.MinVersion != "6.0" || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("KernelError %+v", ke)
		}
		if !strings.Contains(err.Error(), "modprobe ublk_drv") {
			t.Errorf("message %q does not say how to fix it", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = Create(ctx, newMemBackend(1<<20, 512), DeviceOptions{})
		if !errors.As(err, &ke) {
			t.Errorf("Create = %v, want *KernelError", err)
		}
		_, err = Recover(ctx, 0, newMemBackend(1<<20, 512), DeviceOptions{})
		if !errors.As(err, &ke) {
			t.Errorf("Recover = %v, want *KernelError", err)
		}
	} else if err != nil {
		t.Fatalf("%s exists but Supported() = %v", ControlPath, err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d fds open after, %d before", after, before)
	}
}

func TestKernelErrorMessage(t *testing.T) {
	err := error(&KernelError{Feature: "UBLK_U_CMD_GET_FEATURES", MinVersion: "6.5", Err: &CmdError{Op: "GET_FEATURES", DevID: -1, Errno: 22}})
	want := "ublk: kernel lacks UBLK_U_CMD_GET_FEATURES (needs Linux >= 6.5): ublk GET_FEATURES: invalid argument"
	if err.Error() != want {
		t.Fatalf("%q\nwant %q", err, want)
	}
	if got := checkFeatures(FlagUserRecovery | FlagCmdIoctlEncode); got == nil || !strings.Contains(got.Error(), "UBLK_F_USER_RECOVERY_REISSUE") {
		t.Errorf("checkFeatures without REISSUE = %v", got)
	}
	if got := checkFeatures(0x1ff); got != nil {
		t.Errorf("checkFeatures(all) = %v", got)
	}
}
