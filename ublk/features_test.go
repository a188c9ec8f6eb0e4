package ublk

import (
	"errors"
	"math/bits"
	"os"
	"strings"
	"testing"
)

// The flag values are the uapi header's (include/uapi/linux/ublk_cmd.h):
// KnownFeatures lists each once, in bit order, bit 0 to 19.
func TestKnownFeaturesBits(t *testing.T) {
	for i, f := range KnownFeatures {
		if f.Flag != 1<<i || bits.OnesCount64(f.Flag) != 1 {
			t.Errorf("%s: flag %#x at row %d, want bit %d", f.Name, f.Flag, i, i)
		}
	}
	if FlagUpdateSize != 1<<10 || FlagBatchIO != 1<<15 || FlagSafeStopDev != 1<<17 || FlagNoAutoPartScan != 1<<18 {
		t.Error("a flag differs from ublk_cmd.h")
	}
	// UBLK_U_CMD_UPDATE_SIZE: _IOWR('u', 0x15, struct ublksrv_ctrl_cmd).
	if uCmdUpdateSize != 0xc0207515 {
		t.Errorf("UBLK_U_CMD_UPDATE_SIZE = %#x", uCmdUpdateSize)
	}
}

func featureLine(t *testing.T, table, name string) string {
	t.Helper()
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return l
		}
	}
	t.Fatalf("no line for %s in\n%s", name, table)
	return ""
}

// A fake GET_FEATURES mask: 6.12's (0x1fe, bits 1-8, as the VM lab's
// 6.12.107 answers) shows UPDATE_SIZE not offered and resize refused; with
// bit 10 and an unknown bit 40 added, UPDATE_SIZE is used and the unknown
// bit is named.
func TestFeatureTable(t *testing.T) {
	var b strings.Builder
	k := KernelInfo{Release: "6.12.107+deb12-amd64", Features: 0x1fe, Probed: true}
	if err := k.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "kernel: Linux 6.12.107+deb12-amd64\nublk: GET_FEATURES 0x1fe\n") {
		t.Errorf("header:\n%s", out)
	}
	if l := featureLine(t, out, "UBLK_F_UPDATE_SIZE"); !strings.Contains(l, " no ") || !strings.Contains(l, "resize refused") {
		t.Errorf("6.12 line %q", l)
	}
	if l := featureLine(t, out, "UBLK_F_USER_RECOVERY"); !strings.Contains(l, " yes ") || !strings.Contains(l, "used:") {
		t.Errorf("line %q", l)
	}
	if n := strings.Count(out, "\n"); n != 3+len(KnownFeatures) {
		t.Errorf("%d lines, want %d:\n%s", n, 3+len(KnownFeatures), out)
	}

	b.Reset()
	k.Features |= FlagUpdateSize | 1<<40
	if err := k.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	if l := featureLine(t, out, "UBLK_F_UPDATE_SIZE"); !strings.Contains(l, " yes ") || !strings.Contains(l, "used: resize") {
		t.Errorf("7.x line %q", l)
	}
	if !strings.Contains(out, "bit 40") || !strings.Contains(out, "unknown to this build") {
		t.Errorf("unknown bit not shown:\n%s", out)
	}

	// A mask without a required flag: the table still shows, and says why
	// ublk is unusable.
	b.Reset()
	k = KernelInfo{Release: "6.1.0", Features: FlagUserRecovery, Probed: true, Err: checkFeatures(FlagUserRecovery)}
	_ = k.WriteTable(&b)
	if !strings.Contains(b.String(), "unusable: ublk: kernel lacks UBLK_F_USER_RECOVERY_REISSUE") {
		t.Errorf("missing required flag not said:\n%s", b.String())
	}
}

// Without /dev/ublk-control (the development host) Probe still answers: the
// release, and one line saying why there are no features.
func TestProbeWithoutDriver(t *testing.T) {
	if _, err := os.Stat(ControlPath); err == nil {
		t.Skip("ublk_drv is loaded")
	}
	k := Probe(t.Context())
	var ke *KernelError
	if k.Probed || !errors.As(k.Err, &ke) || ke.Feature != "ublk_drv" || k.Release == "" {
		t.Fatalf("Probe() = %+v", k)
	}
	var b strings.Builder
	_ = k.WriteTable(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "ublk: no features known: ublk: kernel lacks ublk_drv") {
		t.Errorf("table without the driver:\n%s", b.String())
	}
}

type sizedBackend struct {
	Backend
	bs uint32
}

func (b sizedBackend) BlockSize() uint32 { return b.bs }

// Resize on a driver without UBLK_F_UPDATE_SIZE fails at once, naming the
// feature and the release, without a command; sizes that are not whole
// blocks are refused; the command carries 512-byte sectors.
func TestResizeRefused(t *testing.T) {
	d := &Device{id: 3, features: 0x1fe, b: sizedBackend{bs: 4096}}
	err := d.Resize(t.Context(), 1<<30)
	var ke *KernelError
	if !errors.As(err, &ke) || ke.Feature != "UBLK_F_UPDATE_SIZE" ||
		err.Error() != "ublk resize dev 3: ublk: kernel lacks UBLK_F_UPDATE_SIZE (needs Linux >= 6.16)" {
		t.Fatalf("Resize without the feature: %v", err)
	}
	d.features |= FlagUpdateSize
	for _, size := range []int64{0, -4096, 4096*10 + 512} {
		if err := d.Resize(t.Context(), size); err == nil || !strings.Contains(err.Error(), "not a positive multiple of 4096") {
			t.Errorf("Resize(%d) = %v", size, err)
		}
	}
	q := updateSizeReq(3, 3<<30)
	if q.data != 3<<30/512 || q.devID != 3 || q.cmdOp != uCmdUpdateSize || q.in != nil || q.outLen != 0 {
		t.Errorf("UPDATE_SIZE request %+v", q)
	}
}
