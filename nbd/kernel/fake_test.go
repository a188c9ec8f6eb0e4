package nbdkernel

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

// fakeKernel models the nbd driver's netlink side closely enough for the
// unit tests: it parses the request bytes Attach produces, validates them
// as nbd_genl_connect does, takes its own references to the socket fds
// (dup), and talks NBD on them like the driver's request path.
type fakeKernel struct {
	missing bool   // no "nbd" family (module not loaded)
	family  uint16 // the family id it hands out

	mu        sync.Mutex
	devices   map[int]*fakeDevice
	requests  []fakeRequest
	connected map[int]bool // preconfigured busy devices
}

type fakeRequest struct {
	family uint16
	cmd    uint8
	attrs  []attribute
}

type fakeDevice struct {
	index       int
	size, bs    uint64
	flags       uint64
	timeout     uint64
	deadConn    uint64
	backend     string
	socks       []net.Conn
	connected   bool
	sockMu      []sync.Mutex // one request at a time per socket
	writeMu     []sync.Mutex // whole requests on the wire
	nextCookie  atomic.Uint64
	disconnects int
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{family: 0x2a, devices: map[int]*fakeDevice{}, connected: map[int]bool{}}
}

func (k *fakeKernel) request(ctx context.Context, family uint16, cmd, version uint8, attrs []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	as, err := parseAttrs(attrs)
	if err != nil {
		return nil, syscall.EINVAL
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.requests = append(k.requests, fakeRequest{family: family, cmd: cmd, attrs: as})
	if family == nl.GENL_ID_CTRL {
		if cmd != nl.GENL_CTRL_CMD_GETFAMILY || version != nl.GENL_CTRL_VERSION {
			return nil, syscall.EOPNOTSUPP
		}
		for _, a := range as {
			if a.typ == nl.GENL_CTRL_ATTR_FAMILY_NAME && string(a.value) == "nbd\x00" && !k.missing {
				id := make([]byte, 2)
				binary.NativeEndian.PutUint16(id, k.family)
				return serializeAttrs([]*nl.RtAttr{
					nl.NewRtAttr(nl.GENL_CTRL_ATTR_FAMILY_ID, id),
					nl.NewRtAttr(nl.GENL_CTRL_ATTR_FAMILY_NAME, nl.ZeroTerminated("nbd"))}), nil
			}
		}
		return nil, syscall.ENOENT
	}
	if family != k.family || version != genlVersion {
		return nil, syscall.EINVAL
	}
	switch cmd {
	case cmdConnect:
		return k.connect(as)
	case cmdDisconnect:
		return k.disconnect(as)
	case cmdStatus:
		return k.status(as)
	}
	return nil, syscall.EOPNOTSUPP
}

func u64(a attribute) uint64 { return binary.NativeEndian.Uint64(a.value) }

func (k *fakeKernel) connect(as []attribute) ([]byte, error) {
	d := &fakeDevice{index: -1}
	var haveSize, haveSocks bool
	var fds []int
	for _, a := range as {
		switch a.typ {
		case attrIndex:
			v, err := attrU32(a)
			if err != nil {
				return nil, err
			}
			d.index = int(v)
		case attrSizeBytes:
			d.size, haveSize = u64(a), true
		case attrBlockSizeBytes:
			d.bs = u64(a)
		case attrTimeout:
			d.timeout = u64(a)
		case attrDeadConnTimeout:
			d.deadConn = u64(a)
		case attrServerFlags:
			d.flags = u64(a)
		case attrBackendIdentifier:
			d.backend = string(a.value)
		case attrSockets:
			haveSocks = true
			items, err := parseAttrs(a.value)
			if err != nil {
				return nil, syscall.EINVAL
			}
			for _, it := range items {
				if it.typ != sockItem {
					return nil, syscall.EINVAL
				}
				fs, err := parseAttrs(it.value)
				if err != nil {
					return nil, syscall.EINVAL
				}
				for _, f := range fs {
					if f.typ == sockFD {
						v, err := attrU32(f)
						if err != nil {
							return nil, err
						}
						fds = append(fds, int(v))
					}
				}
			}
		}
	}
	if !haveSocks || !haveSize || len(fds) == 0 {
		return nil, syscall.EINVAL
	}
	if d.bs < 512 || d.bs > uint64(os.Getpagesize()) || d.bs&(d.bs-1) != 0 {
		return nil, syscall.EINVAL
	}
	if len(fds) > 1 && d.flags&flagCanMultiConn == 0 {
		return nil, syscall.EINVAL
	}
	if d.index < 0 {
		for i := 0; ; i++ {
			if !k.busy(i) {
				d.index = i
				break
			}
		}
	} else if k.busy(d.index) {
		return nil, syscall.EBUSY
	}
	for _, fd := range fds {
		nfd, err := syscall.Dup(fd) // the driver's own reference (sockfd_lookup)
		if err != nil {
			return nil, syscall.EBADF
		}
		f := os.NewFile(uintptr(nfd), "fake-kernel")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, syscall.ENOTSOCK
		}
		d.socks = append(d.socks, c)
	}
	d.sockMu = make([]sync.Mutex, len(d.socks))
	d.writeMu = make([]sync.Mutex, len(d.socks))
	d.connected = true
	k.devices[d.index] = d
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, uint32(d.index))
	return serializeAttrs([]*nl.RtAttr{nl.NewRtAttr(attrIndex, b)}), nil
}

func (k *fakeKernel) busy(i int) bool {
	if k.connected[i] {
		return true
	}
	d, ok := k.devices[i]
	return ok && d.connected
}

func indexOf(as []attribute) (int, bool) {
	for _, a := range as {
		if a.typ == attrIndex {
			v, err := attrU32(a)
			return int(v), err == nil
		}
	}
	return -1, false
}

// disconnect does what nbd_disconnect_and_put does: NBD_CMD_DISC on every
// socket, then shut the sockets down.
func (k *fakeKernel) disconnect(as []attribute) ([]byte, error) {
	i, ok := indexOf(as)
	if !ok {
		return nil, syscall.EINVAL
	}
	d, ok := k.devices[i]
	if !ok {
		return nil, syscall.EINVAL
	}
	d.disconnects++
	if !d.connected {
		return nil, nil
	}
	for j, c := range d.socks {
		d.writeMu[j].Lock()
		c.Write(requestHeader(0, nbdCmdDisc, 0, 0))
		c.Close()
		d.writeMu[j].Unlock()
	}
	d.connected = false
	return nil, nil
}

func (k *fakeKernel) status(as []attribute) ([]byte, error) {
	list := nl.NewRtAttr(attrDeviceList, nil) // nla_nest_start_noflag
	add := func(i int, connected bool) {
		item := list.AddRtAttr(deviceItem, nil)
		item.AddRtAttr(deviceIndex, nl.Uint32Attr(uint32(i)))
		var c uint8
		if connected {
			c = 1
		}
		item.AddRtAttr(deviceConnected, nl.Uint8Attr(c))
	}
	if i, ok := indexOf(as); ok {
		if k.devices[i] != nil || k.connected[i] {
			add(i, k.busy(i))
		}
	} else {
		for i := 0; i < 16; i++ {
			add(i, k.busy(i))
		}
	}
	return list.Serialize(), nil
}

func (k *fakeKernel) device(t *testing.T, i int) *fakeDevice {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.devices[i]
	if d == nil {
		t.Fatalf("fake kernel: no device %d", i)
	}
	return d
}

func (k *fakeKernel) cmds() []uint8 {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []uint8
	for _, r := range k.requests {
		if r.family == k.family {
			out = append(out, r.cmd)
		}
	}
	return out
}

// NBD wire commands the fake driver sends (nbd.h).
const (
	nbdCmdRead        = 0
	nbdCmdWrite       = 1
	nbdCmdDisc        = 2
	nbdCmdFlush       = 3
	nbdCmdTrim        = 4
	nbdCmdWriteZeroes = 6
	nbdCmdFlagFUA     = 1 << 16
)

func requestHeader(cookie uint64, typ uint32, off uint64, length uint32) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint32(b[0:], 0x25609513)
	binary.BigEndian.PutUint32(b[4:], typ)
	binary.BigEndian.PutUint64(b[8:], cookie)
	binary.BigEndian.PutUint64(b[16:], off)
	binary.BigEndian.PutUint32(b[24:], length)
	return b
}

// do sends one request on socket sock and waits for its simple reply, as
// the driver would (one request at a time per socket is enough here). It
// returns the reply's error and a READ's data.
func (d *fakeDevice) do(sock int, typ uint32, off uint64, length uint32, payload []byte) (uint32, []byte, error) {
	d.sockMu[sock].Lock()
	defer d.sockMu[sock].Unlock()
	cookie := d.nextCookie.Add(1)
	c := d.socks[sock]
	d.writeMu[sock].Lock()
	_, err := c.Write(append(requestHeader(cookie, typ, off, length), payload...))
	d.writeMu[sock].Unlock()
	if err != nil {
		return 0, nil, err
	}
	var r [16]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		return 0, nil, err
	}
	if m := binary.BigEndian.Uint32(r[0:]); m != 0x67446698 {
		return 0, nil, fmt.Errorf("reply magic %#x", m)
	}
	if got := binary.BigEndian.Uint64(r[8:]); got != cookie {
		return 0, nil, fmt.Errorf("reply cookie %d, want %d", got, cookie)
	}
	errno := binary.BigEndian.Uint32(r[4:])
	var data []byte
	if typ&0xffff == nbdCmdRead && errno == 0 {
		data = make([]byte, length)
		if _, err := io.ReadFull(c, data); err != nil {
			return 0, nil, err
		}
	}
	return errno, data, nil
}
