package nbdkernel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
)

// nla builds one netlink attribute by hand (struct nlattr: u16 len, u16
// type, value, padding to 4), independently of the nl package.
func nla(typ uint16, value []byte) []byte {
	b := make([]byte, 4, 4+len(value)+3)
	binary.NativeEndian.PutUint16(b[0:], uint16(4+len(value)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func le32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// The uapi numbers, spelled out as in nbd-netlink.h and nbd.h, so a typo in
// uapi.go cannot hide behind the same constant on both sides.
func TestUAPIValues(t *testing.T) {
	got := []int{attrIndex, attrSizeBytes, attrBlockSizeBytes, attrTimeout, attrServerFlags,
		attrClientFlags, attrSockets, attrDeadConnTimeout, attrDeviceList, attrBackendIdentifier,
		cmdConnect, cmdDisconnect, cmdReconfigure, cmdLinkDead, cmdStatus,
		sockItem, sockFD, deviceItem, deviceIndex, deviceConnected,
		flagHasFlags, flagReadOnly, flagSendFlush, flagSendFUA, flagRotational, flagSendTrim,
		flagSendWriteZeroes, flagCanMultiConn, cflagDestroyOnDisconnect, cflagDisconnectOnClose}
	want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
		1, 2, 3, 4, 5,
		1, 1, 1, 1, 2,
		0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x100, 0x1, 0x2}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("uapi values\n got %v\nwant %v", got, want)
	}
	if genlFamilyName != "nbd" || genlVersion != 1 {
		t.Fatalf("family %q version %d", genlFamilyName, genlVersion)
	}
}

func TestConnectAttrsLayout(t *testing.T) {
	cfg := connectConfig{
		index: 3, sizeBytes: 1 << 30, blockSizeBytes: 4096, timeoutSec: 30, deadConnSec: 5,
		serverFlags: 0x16d, fds: []int{7, 9}, backendIdentity: "iser-attach:lun0",
	}
	const nested = 1 << 15
	want := cat(
		nla(1, le32(3)),
		nla(2, le64(1<<30)),
		nla(3, le64(4096)),
		nla(4, le64(30)),
		nla(5, le64(0x16d)),
		nla(7|nested, cat(
			nla(1|nested, nla(1, le32(7))),
			nla(1|nested, nla(1, le32(9))))),
		nla(8, le64(5)),
		nla(10, []byte("iser-attach:lun0\x00")),
	)
	if got := connectAttrs(cfg); !bytes.Equal(got, want) {
		t.Fatalf("connect attributes\n got % x\nwant % x", got, want)
	}

	// Any device, no timeouts, no identifier: only what the driver needs.
	cfg = connectConfig{index: AnyIndex, sizeBytes: 8 << 20, blockSizeBytes: 512, serverFlags: 1, fds: []int{4}}
	want = cat(
		nla(2, le64(8<<20)),
		nla(3, le64(512)),
		nla(5, le64(1)),
		nla(7|nested, nla(1|nested, nla(1, le32(4)))),
	)
	if got := connectAttrs(cfg); !bytes.Equal(got, want) {
		t.Fatalf("minimal connect attributes\n got % x\nwant % x", got, want)
	}
}

func TestIndexAttrs(t *testing.T) {
	if got, want := indexAttrs(12), nla(1, le32(12)); !bytes.Equal(got, want) {
		t.Fatalf("index attrs % x, want % x", got, want)
	}
	if got := indexAttrs(-1); got != nil {
		t.Fatalf("index attrs for every device: % x, want none", got)
	}
}

func TestParseConnectReply(t *testing.T) {
	i, err := parseConnectReply(nla(1, le32(17)))
	if err != nil || i != 17 {
		t.Fatalf("parse reply: %d, %v", i, err)
	}
	if _, err := parseConnectReply(nla(2, le64(1))); err == nil {
		t.Fatal("a reply without NBD_ATTR_INDEX parsed")
	}
	if _, err := parseConnectReply(nla(1, []byte{1, 2})); err == nil {
		t.Fatal("a short NBD_ATTR_INDEX parsed")
	}
	if _, err := parseConnectReply([]byte{200, 0, 1, 0, 1}); err == nil {
		t.Fatal("a truncated attribute parsed")
	}
}

// The STATUS reply as nbd_genl_status builds it: NBD_ATTR_DEVICE_LIST and
// NBD_DEVICE_ITEM nests without NLA_F_NESTED (nla_nest_start_noflag), a u8
// NBD_DEVICE_CONNECTED padded to four bytes.
func TestParseStatusReply(t *testing.T) {
	b := nla(9, cat(
		nla(1, cat(nla(1, le32(0)), nla(2, []byte{1}))),
		nla(1, cat(nla(1, le32(1)), nla(2, []byte{0}))),
		nla(1, cat(nla(2, []byte{1}), nla(1, le32(7)))),
	))
	got, err := parseStatusReply(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []DeviceStatus{{0, true}, {1, false}, {7, true}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status %v, want %v", got, want)
	}
	if got, err := parseStatusReply(nla(9, nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty device list: %v, %v", got, err)
	}
	if _, err := parseStatusReply(nla(9, nla(1, nla(2, []byte{1})))); err == nil {
		t.Fatal("an item without an index parsed")
	}
}

func FuzzParseStatusReply(f *testing.F) {
	f.Add(nla(9, nla(1, cat(nla(1, le32(0)), nla(2, []byte{1})))))
	f.Add([]byte{8, 0, 9, 0, 4, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStatusReply(b) // must not panic
		parseConnectReply(b)
	})
}

// The real transport against the running kernel: the control family
// resolves itself (nlctrl is always GENL_ID_CTRL), and Supported gives nil
// or an *UnsupportedError, never another failure.
func TestNetlinkTransport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	attrs := serializeAttrs([]*nl.RtAttr{nl.NewRtAttr(nl.GENL_CTRL_ATTR_FAMILY_NAME, nl.ZeroTerminated("nlctrl"))})
	reply, err := netlinkTransport{}.request(ctx, nl.GENL_ID_CTRL, nl.GENL_CTRL_CMD_GETFAMILY, nl.GENL_CTRL_VERSION, attrs)
	if err != nil {
		t.Fatalf("resolve nlctrl: %v", err)
	}
	as, err := parseAttrs(reply)
	if err != nil {
		t.Fatal(err)
	}
	var id uint16
	for _, a := range as {
		if a.typ == nl.GENL_CTRL_ATTR_FAMILY_ID {
			id = binary.NativeEndian.Uint16(a.value)
		}
	}
	if id != nl.GENL_ID_CTRL {
		t.Fatalf("nlctrl family id %#x, want %#x", id, nl.GENL_ID_CTRL)
	}
	attrs = serializeAttrs([]*nl.RtAttr{nl.NewRtAttr(nl.GENL_CTRL_ATTR_FAMILY_NAME, nl.ZeroTerminated("no-such-family"))})
	if _, err := (netlinkTransport{}).request(ctx, nl.GENL_ID_CTRL, nl.GENL_CTRL_CMD_GETFAMILY, nl.GENL_CTRL_VERSION, attrs); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unknown family: %v, want ENOENT", err)
	}
	if err := Supported(ctx); err != nil && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Supported: %v", err)
	}
	cancelled, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := (netlinkTransport{}).request(cancelled, nl.GENL_ID_CTRL, nl.GENL_CTRL_CMD_GETFAMILY, nl.GENL_CTRL_VERSION, attrs); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
}
