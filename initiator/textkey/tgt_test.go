package textkey_test

// Negotiation against a real peer: Linux tgtd (package tgt), reached over
// iSCSI/TCP on loopback with hand-built Login and Text PDUs (RFC 7143
// sections 11.12-11.13 and 11.10-11.11). The test starts its own tgtd on a
// free port and a private control socket, and stops it by pid.
//
// Run with -tgt.capture=DIR to write the text data segments tgtd returned
// (used to refresh discovery/testdata and the fuzz corpora).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator/textkey"
)

var captureDir = flag.String("tgt.capture", "", "write tgtd's text responses into this directory")

const initiatorName = "iqn.2024-01.org.iser-attach:textkey-test"

type tgtd struct {
	t       *testing.T
	ctl     int
	port    int
	cmd     *exec.Cmd
	workDir string
}

// startTgtd runs tgtd in the foreground with two targets, the second one
// with two LUNs, listening on 127.0.0.1 and [::1].
func startTgtd(t *testing.T) *tgtd {
	t.Helper()
	if _, err := exec.LookPath("tgtd"); err != nil {
		t.Skip("tgtd not installed (try: apt-get install tgt)")
	}
	if os.Geteuid() != 0 {
		t.Skip("tgtd needs root")
	}
	port := freePort(t)
	d := &tgtd{t: t, port: port, workDir: t.TempDir()}
	for ctl := 20000 + port%10000; ; ctl++ {
		if _, err := os.Stat(fmt.Sprintf("/var/run/tgtd/socket.%d", ctl)); errors.Is(err, os.ErrNotExist) {
			d.ctl = ctl
			break
		}
	}
	portals := fmt.Sprintf("portal=127.0.0.1:%d,portal=[::1]:%d", port, port)
	d.cmd = exec.Command("tgtd", "-f", "-C", strconv.Itoa(d.ctl), "--iscsi", portals)
	logf, err := os.Create(filepath.Join(d.workDir, "tgtd.log"))
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start tgtd: %v", err)
	}
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill() // tgtd ignores SIGTERM while it has targets
		_ = d.cmd.Wait()
		sock := fmt.Sprintf("/var/run/tgtd/socket.%d", d.ctl)
		_ = os.Remove(sock)
		_ = os.Remove(sock + ".lock")
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("tgtd log:\n%s", b)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for d.adm("--op", "show", "--mode", "target") != nil {
		if time.Now().After(deadline) {
			t.Fatal("tgtd did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for tid, name := range []string{"iqn.2024-01.org.iser-attach:disk1", "iqn.2024-01.org.iser-attach:disk2"} {
		tid++
		d.mustAdm("--op", "new", "--mode", "target", "--tid", strconv.Itoa(tid), "-T", name)
		for lun := 1; lun <= tid; lun++ {
			img := filepath.Join(d.workDir, fmt.Sprintf("t%d-l%d.img", tid, lun))
			if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			d.mustAdm("--op", "new", "--mode", "logicalunit", "--tid", strconv.Itoa(tid),
				"--lun", strconv.Itoa(lun), "-b", img)
		}
		d.mustAdm("--op", "bind", "--mode", "target", "--tid", strconv.Itoa(tid), "-I", "ALL")
	}
	return d
}

func (d *tgtd) adm(args ...string) error {
	args = append([]string{"-C", strconv.Itoa(d.ctl), "--lld", "iscsi"}, args...)
	out, err := exec.Command("tgtadm", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tgtadm %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (d *tgtd) mustAdm(args ...string) {
	d.t.Helper()
	if err := d.adm(args...); err != nil {
		d.t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// conn is a bare iSCSI/TCP connection speaking just Login and Text.
type conn struct {
	t      *testing.T
	c      net.Conn
	itt    uint32
	cmdSN  uint32
	statSN uint32
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &conn{t: t, c: c, cmdSN: 1}
}

type response struct {
	opcode, flags byte
	status        uint16
	ttt           uint32
	data          []byte
}

func (c *conn) send(bhs []byte, data []byte) {
	c.t.Helper()
	bhs[4] = 0
	bhs[5], bhs[6], bhs[7] = byte(len(data)>>16), byte(len(data)>>8), byte(len(data))
	pad := (4 - len(data)%4) % 4
	pdu := append(append(bhs, data...), make([]byte, pad)...)
	if _, err := c.c.Write(pdu); err != nil {
		c.t.Fatalf("write PDU: %v", err)
	}
}

func (c *conn) recv() response {
	c.t.Helper()
	bhs := make([]byte, 48)
	if _, err := io.ReadFull(c.c, bhs); err != nil {
		c.t.Fatalf("read BHS: %v", err)
	}
	n := int(bhs[5])<<16 | int(bhs[6])<<8 | int(bhs[7])
	data := make([]byte, n+(4-n%4)%4)
	if _, err := io.ReadFull(c.c, data); err != nil {
		c.t.Fatalf("read data segment: %v", err)
	}
	c.statSN = binary.BigEndian.Uint32(bhs[24:]) + 1
	return response{
		opcode: bhs[0] & 0x3f, flags: bhs[1],
		status: binary.BigEndian.Uint16(bhs[36:]),
		ttt:    binary.BigEndian.Uint32(bhs[20:]),
		data:   data[:n],
	}
}

// login sends one Login Request in the operational stage asking to go to
// full feature phase (T=1, CSG=1, NSG=3) and returns the response's text.
func (c *conn) login(kvs []textkey.KV, transit bool) response {
	c.t.Helper()
	bhs := make([]byte, 48)
	bhs[0] = 0x40 | 0x03
	bhs[1] = 1<<2 | 3
	if transit {
		bhs[1] |= 0x80
	}
	copy(bhs[8:14], []byte{0x80, 0x00, 0x00, 0x12, 0x34, 0x56}) // ISID, random format
	binary.BigEndian.PutUint32(bhs[16:], c.itt)
	binary.BigEndian.PutUint32(bhs[24:], c.cmdSN)
	binary.BigEndian.PutUint32(bhs[28:], c.statSN)
	c.send(bhs, textkey.Encode(kvs))
	r := c.recv()
	if r.opcode != 0x23 {
		c.t.Fatalf("login: opcode %#x, want Login Response", r.opcode)
	}
	if r.status != 0 {
		c.t.Fatalf("login: status %#04x (text %q)", r.status, r.data)
	}
	if r.flags&0x40 != 0 {
		c.t.Fatal("login: C bit set; continuation not handled by this test")
	}
	return r
}

// text runs one Text exchange, following C-bit continuations.
func (c *conn) text(kvs []textkey.KV) []byte {
	c.t.Helper()
	c.itt++
	var all []byte
	ttt := uint32(0xffffffff)
	data := textkey.Encode(kvs)
	for {
		bhs := make([]byte, 48)
		bhs[0] = 0x40 | 0x04
		bhs[1] = 0x80
		binary.BigEndian.PutUint32(bhs[16:], c.itt)
		binary.BigEndian.PutUint32(bhs[20:], ttt)
		binary.BigEndian.PutUint32(bhs[24:], c.cmdSN)
		binary.BigEndian.PutUint32(bhs[28:], c.statSN)
		c.send(bhs, data)
		r := c.recv()
		if r.opcode != 0x24 {
			c.t.Fatalf("text: opcode %#x, want Text Response", r.opcode)
		}
		all = append(all, r.data...)
		if r.flags&0x40 == 0 { // C=0: complete
			return all
		}
		ttt, data = r.ttt, nil
	}
}

func capture(t *testing.T, name string, data []byte) {
	if *captureDir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(*captureDir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTgtdDiscoveryAndLogin(t *testing.T) {
	d := startTgtd(t)

	want := []string{"iqn.2024-01.org.iser-attach:disk1", "iqn.2024-01.org.iser-attach:disk2"}
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run("discovery "+host, func(t *testing.T) { discover(t, d, host, want) })
	}

	// Normal session: full operational negotiation.
	c := dial(t, net.JoinHostPort("::1", strconv.Itoa(d.port)))
	n := textkey.NewNegotiation()
	offers := []textkey.KV{
		{Key: "InitiatorName", Value: initiatorName},
		{Key: "TargetName", Value: want[1]},
		{Key: "SessionType", Value: "Normal"},
		{Key: "HeaderDigest", Value: "CRC32C,None"},
		{Key: "DataDigest", Value: "None"},
		{Key: "MaxRecvDataSegmentLength", Value: "262144"},
		{Key: "MaxBurstLength", Value: "1048576"},
		{Key: "FirstBurstLength", Value: "65536"},
		{Key: "InitialR2T", Value: "No"},
		{Key: "ImmediateData", Value: "Yes"},
		{Key: "MaxOutstandingR2T", Value: "4"},
		{Key: "DefaultTime2Wait", Value: "0"},
		{Key: "DefaultTime2Retain", Value: "0"},
		{Key: "ErrorRecoveryLevel", Value: "0"},
		{Key: "DataPDUInOrder", Value: "Yes"},
		{Key: "DataSequenceInOrder", Value: "Yes"},
		{Key: "MaxConnections", Value: "1"},
	}
	for _, o := range offers {
		if err := n.Offer(o.Key, o.Value); err != nil {
			t.Fatal(err)
		}
	}
	// First round without T so tgtd may still offer keys of its own.
	pending := n.TakeOffers()
	var lastFlags byte
	var transcript []byte
	for round := 0; round < 4; round++ {
		transit := len(pending) == 0 && len(n.Outstanding()) == 0 || round > 0
		r := c.login(pending, transit)
		transcript = append(transcript, r.data...)
		kvs, err := textkey.Parse(r.data)
		if err != nil {
			t.Fatalf("parse tgtd login response %q: %v", r.data, err)
		}
		reply, err := n.Receive(kvs)
		if err != nil {
			t.Fatalf("negotiate with tgtd: %v (response %q)", err, r.data)
		}
		lastFlags = r.flags
		if r.flags&0x80 != 0 {
			if len(reply) != 0 {
				t.Fatalf("tgtd moved to full feature phase leaving %q to answer", reply)
			}
			break
		}
		pending = reply
	}
	capture(t, "tgt-normal-login.txt", transcript)
	if lastFlags&0x80 == 0 {
		t.Fatal("tgtd never set T")
	}
	if out := n.Outstanding(); out != nil {
		t.Fatalf("tgtd left %q unanswered (transcript %q)", out, transcript)
	}
	p, err := n.Results()
	if err != nil {
		t.Fatalf("Results: %v (transcript %q)", err, transcript)
	}
	t.Logf("tgtd negotiated %+v", p)
	// tgt's defaults (usr/iscsi/param.c): MaxBurstLength 262144, CRC32C
	// allowed, MaxRecvDataSegmentLength declared 8192.
	switch {
	case p.MaxBurstLength > 1048576 || p.MaxBurstLength < 512:
		t.Errorf("MaxBurstLength %d", p.MaxBurstLength)
	case p.InitiatorMaxRecvDataSegmentLength != 262144:
		t.Errorf("our MaxRecvDataSegmentLength %d", p.InitiatorMaxRecvDataSegmentLength)
	case p.TargetMaxRecvDataSegmentLength < 512:
		t.Errorf("target MaxRecvDataSegmentLength %d", p.TargetMaxRecvDataSegmentLength)
	case p.FirstBurstLength > p.MaxBurstLength:
		t.Errorf("FirstBurstLength %d > MaxBurstLength %d", p.FirstBurstLength, p.MaxBurstLength)
	case p.DataDigest != "None":
		t.Errorf("DataDigest %q", p.DataDigest)
	}
	if got, _ := n.Answer("TargetPortalGroupTag"); got != "1" {
		t.Errorf("TargetPortalGroupTag = %q, want tgt's 1", got)
	}
	if !bytes.Contains(transcript, []byte("TargetPortalGroupTag=1\x00")) {
		t.Errorf("transcript %q lacks TargetPortalGroupTag", transcript)
	}
}

// discover runs a discovery session to host and checks SendTargets=All.
func discover(t *testing.T, d *tgtd, host string, want []string) {
	c := dial(t, net.JoinHostPort(host, strconv.Itoa(d.port)))
	n := textkey.NewNegotiation()
	for _, o := range []textkey.KV{
		{Key: "InitiatorName", Value: initiatorName},
		{Key: "SessionType", Value: "Discovery"},
		{Key: "HeaderDigest", Value: "None"},
		{Key: "DataDigest", Value: "None"},
		{Key: "MaxRecvDataSegmentLength", Value: "65536"},
	} {
		if err := n.Offer(o.Key, o.Value); err != nil {
			t.Fatal(err)
		}
	}
	r := c.login(n.TakeOffers(), true)
	capture(t, "tgt-discovery-login-"+tag(host)+".txt", r.data)
	kvs, err := textkey.Parse(r.data)
	if err != nil {
		t.Fatalf("parse tgtd discovery login response %q: %v", r.data, err)
	}
	if _, err := n.Receive(kvs); err != nil {
		t.Fatalf("negotiate with tgtd: %v (response %q)", err, r.data)
	}
	if out := n.Outstanding(); out != nil {
		t.Fatalf("tgtd left %q unanswered (response %q)", out, r.data)
	}
	if r.flags&0x80 == 0 {
		t.Fatalf("tgtd did not move to full feature phase (flags %#x)", r.flags)
	}

	st := c.text([]textkey.KV{{Key: "SendTargets", Value: "All"}})
	capture(t, "tgt-sendtargets-"+tag(host)+".txt", st)
	kvs, err = textkey.Parse(st)
	if err != nil {
		t.Fatalf("parse SendTargets response %q: %v", st, err)
	}
	names := textkey.GetAll(kvs, "TargetName")
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("TargetNames = %q, want %q (response %q)", names, want, st)
	}
	addrs := textkey.GetAll(kvs, "TargetAddress")
	if len(addrs) < 2 {
		t.Fatalf("TargetAddresses = %q", addrs)
	}
	portSuffix := fmt.Sprintf("%s:%d,1", hostport(host), d.port)
	for _, a := range addrs {
		if !strings.HasSuffix(a, portSuffix) {
			t.Errorf("TargetAddress %q lacks %q", a, portSuffix)
		}
	}

}

func tag(host string) string {
	if strings.Contains(host, ":") {
		return "ipv6"
	}
	return "ipv4"
}

func hostport(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}
