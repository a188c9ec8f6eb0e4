package main

import (
	"bytes"
	be "encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestCLIServeReadOnly: serve --read-only against a tgtd LUN is an NBD
// export libnbd sees as read-only; reads work, every kind of write is
// refused with EPERM by the server (a raw client sends them, as libnbd
// refuses them itself), FLUSH passes, and the LUN keeps its data, read
// back through a second serve without --read-only. list --json and list
// show the export read-only.
func TestCLIServeReadOnly(t *testing.T) {
	need(t, "nbdinfo", "nbdcopy")
	const size = 16 << 20
	srv := tgttest.Start(t, tgttest.Target{LUNs: []tgttest.LUN{{Size: size}}})
	pattern := bytes.Repeat([]byte("read-only LUN data 0123456789abc\n"), 1<<20/32)[:1<<20]
	lun, err := os.OpenFile(srv.LUNPath(srv.IQN(), 1), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lun.WriteAt(pattern, 0); err != nil {
		t.Fatal(err)
	}
	if err := lun.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	readBack := func(uri, name string) []byte {
		t.Helper()
		out := filepath.Join(dir, name)
		sh(t, "nbdcopy", uri, out)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	ro, logs := startServe(t, srv, nil, "1", "--read-only")
	info, err := exec.Command("nbdinfo", "--json", ro).CombinedOutput()
	if err != nil {
		t.Fatalf("nbdinfo: %v\n%s", err, info)
	}
	var ni struct {
		Exports []struct {
			ReadOnly bool `json:"is_read_only"`
			CanTrim  bool `json:"can_trim"`
			CanZero  bool `json:"can_zero"`
			CanFlush bool `json:"can_flush"`
		} `json:"exports"`
	}
	if err := json.Unmarshal(info, &ni); err != nil || len(ni.Exports) != 1 || !ni.Exports[0].ReadOnly ||
		ni.Exports[0].CanTrim || ni.Exports[0].CanZero || !ni.Exports[0].CanFlush {
		t.Fatalf("nbdinfo: %v %s", err, info)
	}
	if got := readBack(ro, "ro.img"); len(got) != size || !bytes.Equal(got[:len(pattern)], pattern) {
		t.Fatalf("read through the read-only export differs from the LUN's data")
	}
	junk := filepath.Join(dir, "junk.img")
	if err := os.WriteFile(junk, bytes.Repeat([]byte{0xee}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nbdcopy", junk, ro).CombinedOutput(); err == nil {
		t.Fatalf("nbdcopy to the read-only export succeeded:\n%s", out)
	}

	// The server refuses what a client sends anyway.
	c := dialNBD(t, strings.TrimPrefix(ro, "nbd+unix:///?socket="))
	const (
		cmdRead, cmdWrite, cmdFlush, cmdTrim, cmdWriteZeroes = 0, 1, 3, 4, 6
		flagFUA                                              = 1
		ePerm                                                = 1
	)
	blk := bytes.Repeat([]byte{0xee}, 4096)
	for _, r := range []struct {
		name        string
		typ, flags  uint16
		payload     []byte
		wantErrno   uint32
		wantReadLen int
	}{
		{"write", cmdWrite, 0, blk, ePerm, 0},
		{"FUA write", cmdWrite, flagFUA, blk, ePerm, 0},
		{"trim", cmdTrim, 0, nil, ePerm, 0},
		{"write zeroes", cmdWriteZeroes, 0, nil, ePerm, 0},
		{"flush", cmdFlush, 0, nil, 0, 0},
		{"read", cmdRead, 0, nil, 0, 4096},
	} {
		length := uint32(4096)
		if r.typ == cmdFlush {
			length = 0
		}
		errno, data := c.do(t, r.typ, r.flags, 0, length, r.payload, r.wantReadLen)
		if errno != r.wantErrno {
			t.Errorf("%s: errno %d, want %d", r.name, errno, r.wantErrno)
		}
		if r.typ == cmdRead && !bytes.Equal(data, pattern[:4096]) {
			t.Errorf("read after the refused writes: data changed")
		}
	}

	// list shows the export read-only.
	out, errs, err := run(t, nil, "list", "--json")
	if err != nil {
		t.Fatalf("list --json: %v\n%s", err, errs)
	}
	var all []struct {
		Kind     string   `json:"kind"`
		Listen   []string `json:"listen"`
		ReadOnly bool     `json:"read_only"`
		State    string   `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range all {
		if e.Kind == "serve" && len(e.Listen) == 1 && strings.HasSuffix(ro, strings.TrimPrefix(e.Listen[0], "unix:")) {
			found = e.ReadOnly
		}
	}
	if !found {
		t.Errorf("list --json does not show the export read-only:\n%s", out)
	}
	if out, errs, err := run(t, nil, "list"); err != nil || !strings.Contains(out, "serving,ro") {
		t.Errorf("list: %v, no serving,ro state:\n%s%s", err, out, errs)
	}
	if !strings.Contains(logs.String(), `read_only=true`) {
		t.Errorf("serve's log does not say read-only:\n%s", logs.String())
	}

	// Through a second serve, writable, the LUN still holds its data.
	rw, _ := startServe(t, srv, nil, "1")
	info, err = exec.Command("nbdinfo", "--json", rw).CombinedOutput()
	if err != nil || !bytes.Contains(info, []byte(`"is_read_only": false`)) {
		t.Fatalf("nbdinfo of the writable export: %v\n%s", err, info)
	}
	if got := readBack(rw, "rw.img"); !bytes.Equal(got[:len(pattern)], pattern) || bytes.Contains(got, blk) {
		t.Fatalf("the LUN's data changed under the read-only export")
	}
}

// nbdConn is a minimal NBD client (fixed newstyle, NBD_OPT_EXPORT_NAME of
// the default export) that sends whatever it is told to.
type nbdConn struct {
	c      net.Conn
	handle uint64
}

func dialNBD(t *testing.T, sock string) *nbdConn {
	t.Helper()
	n, flags := dialNBDFlags(t, sock)
	if flags&2 == 0 {
		t.Fatalf("transmission flags %#x lack NBD_FLAG_READ_ONLY", flags)
	}
	return n
}

// dialNBDFlags connects and returns the export's transmission flags.
func dialNBDFlags(t *testing.T, sock string) (*nbdConn, uint16) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var hello [18]byte // NBDMAGIC, IHAVEOPT, handshake flags
	if _, err := io.ReadFull(c, hello[:]); err != nil || string(hello[:8]) != "NBDMAGIC" {
		t.Fatalf("NBD greeting %q: %v", hello, err)
	}
	msg := be.BigEndian.AppendUint32(nil, 3) // FIXED_NEWSTYLE | NO_ZEROES
	msg = append(msg, "IHAVEOPT"...)
	msg = be.BigEndian.AppendUint32(msg, 1) // NBD_OPT_EXPORT_NAME
	msg = be.BigEndian.AppendUint32(msg, 0) // the default export
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var exp [10]byte // size, transmission flags
	if _, err := io.ReadFull(c, exp[:]); err != nil {
		t.Fatal(err)
	}
	return &nbdConn{c: c}, be.BigEndian.Uint16(exp[8:])
}

// do sends one request and returns the reply's errno and, for a read of
// readLen bytes that succeeded, the data.
func (n *nbdConn) do(t *testing.T, typ, flags uint16, off uint64, length uint32, payload []byte, readLen int) (uint32, []byte) {
	t.Helper()
	n.handle++
	req := be.BigEndian.AppendUint32(nil, 0x25609513)
	req = be.BigEndian.AppendUint16(req, flags)
	req = be.BigEndian.AppendUint16(req, typ)
	req = be.BigEndian.AppendUint64(req, n.handle)
	req = be.BigEndian.AppendUint64(req, off)
	req = be.BigEndian.AppendUint32(req, length)
	if _, err := n.c.Write(append(req, payload...)); err != nil {
		t.Fatal(err)
	}
	var rep [16]byte
	if _, err := io.ReadFull(n.c, rep[:]); err != nil {
		t.Fatal(err)
	}
	if be.BigEndian.Uint32(rep[:4]) != 0x67446698 || be.BigEndian.Uint64(rep[8:]) != n.handle {
		t.Fatalf("reply %x", rep)
	}
	errno := be.BigEndian.Uint32(rep[4:8])
	if errno != 0 || readLen == 0 {
		return errno, nil
	}
	data := make([]byte, readLen)
	if _, err := io.ReadFull(n.c, data); err != nil {
		t.Fatal(err)
	}
	return errno, data
}
