package nbdkernel

import (
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"time"

	"github.com/iser-attach/iser-attach/nbd"
	"github.com/rs/zerolog"
)

// AnyIndex in Options.Index lets the kernel pick a free /dev/nbdN (creating
// one when every device is in use).
const AnyIndex = -1

// Options configure Attach.
type Options struct {
	// Index is N of /dev/nbdN, or AnyIndex. The zero value asks for
	// /dev/nbd0. Attach fails with EBUSY when that device is in use.
	Index int
	// Connections is the number of sockets, and so of the device's
	// hardware queues (NBD_ATTR_SOCKETS). Default min(NumCPU, 4). More than
	// one needs an export with NBD_FLAG_CAN_MULTI_CONN, which nbd.Server
	// always sets.
	Connections int
	// Timeout is the per-request timeout (NBD_ATTR_TIMEOUT, whole
	// seconds, rounded up). After it the driver gives up on the socket
	// and retries the request on another one, or fails it. Zero sends
	// nothing: the driver then never times out a request and only logs
	// one that takes long. Zero suits in-process sockets.
	Timeout time.Duration
	// DeadConnTimeout is how long the driver waits for a dead socket to
	// be replaced (NBD_CMD_RECONFIGURE) before failing its requests
	// (NBD_ATTR_DEAD_CONN_TIMEOUT, whole seconds, rounded up). Zero sends
	// nothing (fail at once). This package does not reconnect sockets.
	DeadConnTimeout time.Duration
	// BlockSize is the device's logical block size
	// (NBD_ATTR_BLOCK_SIZE_BYTES): a power of two from 512 to the page
	// size, and a multiple of the export's block size. Default: the
	// export's block size, at least 512.
	BlockSize uint32
	// Size is the device size in bytes (NBD_ATTR_SIZE_BYTES), a multiple
	// of BlockSize, at most the export's size. Default: the export's size.
	Size int64
	// ReadOnly attaches a writable export read-only (NBD_FLAG_READ_ONLY).
	// A read-only export is always attached read-only.
	ReadOnly bool
	// BackendID is shown in /sys/block/nbdN/backend
	// (NBD_ATTR_BACKEND_IDENTIFIER); "" sends nothing.
	BackendID string
	// Logger receives attach and detach events. The zero Logger discards.
	Logger zerolog.Logger
}

// config checks o against the export and the kernel's limits and returns
// the NBD_CMD_CONNECT configuration without sockets.
func (o Options) config(info nbd.ExportInfo) (connectConfig, error) {
	if o.Index < AnyIndex {
		return connectConfig{}, fmt.Errorf("index %d: want a device number or AnyIndex", o.Index)
	}
	conns := o.Connections
	if conns == 0 {
		conns = min(runtime.NumCPU(), 4)
	}
	if conns < 0 || conns > 64 {
		return connectConfig{}, fmt.Errorf("%d connections: want 1 to 64", conns)
	}
	flags := uint64(info.TransmissionFlags) & kernelFlags
	if conns > 1 && flags&flagCanMultiConn == 0 {
		return connectConfig{}, fmt.Errorf("%d connections: export %q does not allow multi-conn", conns, info.Name)
	}
	if o.ReadOnly {
		flags |= flagReadOnly
	}
	if flags&flagReadOnly != 0 {
		flags &^= flagSendTrim | flagSendWriteZeroes
	}

	bs := o.BlockSize
	if bs == 0 {
		bs = max(info.BlockSize, minBlockSize)
	}
	page := uint32(os.Getpagesize())
	if bs < minBlockSize || bs > page || bits.OnesCount32(bs) != 1 {
		return connectConfig{}, fmt.Errorf("block size %d: want a power of two from %d to %d", bs, minBlockSize, page)
	}
	if bs%info.BlockSize != 0 {
		return connectConfig{}, fmt.Errorf("block size %d: not a multiple of export %q's block size %d", bs, info.Name, info.BlockSize)
	}
	size := o.Size
	if size == 0 {
		size = info.Size - info.Size%int64(bs)
	}
	if size <= 0 || size > info.Size || size%int64(bs) != 0 {
		return connectConfig{}, fmt.Errorf("size %d: want a multiple of block size %d, at most the export's %d bytes", size, bs, info.Size)
	}
	if o.Timeout < 0 || o.DeadConnTimeout < 0 {
		return connectConfig{}, fmt.Errorf("negative timeout")
	}
	return connectConfig{
		index:           o.Index,
		sizeBytes:       uint64(size),
		blockSizeBytes:  uint64(bs),
		timeoutSec:      ceilSeconds(o.Timeout),
		deadConnSec:     ceilSeconds(o.DeadConnTimeout),
		serverFlags:     flags,
		fds:             make([]int, conns),
		backendIdentity: o.BackendID,
	}, nil
}

func ceilSeconds(d time.Duration) uint64 {
	return uint64((d + time.Second - 1) / time.Second)
}
