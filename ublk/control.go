package ublk

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ControlPath is the ublk driver's control device.
const ControlPath = "/dev/ublk-control"

// anyDev asks ADD_DEV to choose the device number; it is also the dev_id of
// commands that do not address a device (GET_FEATURES).
const anyDev = ^uint32(0)

// noQueue is ublksrv_ctrl_cmd.queue_id of commands not aimed at a queue.
const noQueue = 0xffff

// control issues control commands on /dev/ublk-control through a private
// SQE128 io_uring. Commands run one at a time (mu); each waits for its own
// completion. Payloads go through a page of our own (mmap'd, so it never
// moves and the kernel may write it from an io-wq worker).
type control struct {
	mu   sync.Mutex
	f    *os.File
	r    *ring
	page []byte
	seq  uint64
}

func openControl() (*control, error) {
	f, err := os.OpenFile(ControlPath, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err // *fs.PathError: "open /dev/ublk-control: ..."
	}
	c := &control{f: f}
	if err := c.setup(); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func (c *control) setup() error {
	r, err := newRing(4, true)
	if err != nil {
		return err
	}
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		r.close()
		return fmt.Errorf("mmap control page: %w", err)
	}
	c.r, c.page = r, page
	return nil
}

// teardown drops the ring and the page. A command still in flight in the
// kernel is cancelled with the ring (an interruptible wait such as
// START_DEV's returns EINTR) and can only fault on the unmapped page.
func (c *control) teardown() {
	if c.r != nil {
		c.r.close()
		c.r = nil
	}
	if c.page != nil {
		_ = unix.Munmap(c.page)
		c.page = nil
	}
}

func (c *control) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.teardown()
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", ControlPath, err)
	}
	return nil
}

// CmdError is a control command the driver refused.
type CmdError struct {
	Op    string // e.g. "ADD_DEV", from the UBLK_U_CMD_* name
	DevID int    // -1 for commands without a device
	Errno syscall.Errno
}

func (e *CmdError) Error() string {
	if e.DevID < 0 {
		return fmt.Sprintf("ublk %s: %v", e.Op, e.Errno)
	}
	return fmt.Sprintf("ublk %s dev %d: %v", e.Op, e.DevID, e.Errno)
}

func (e *CmdError) Unwrap() error { return e.Errno }

// ctrlReq is one control command.
type ctrlReq struct {
	op     string
	cmdOp  uint32
	devID  uint32
	data   uint64
	in     []byte // copied to the payload page (Addr/Len point at it)
	outLen int    // bytes of the page returned
}

// do runs one command and returns the payload page's first outLen bytes.
func (c *control) do(ctx context.Context, q ctrlReq) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil, fmt.Errorf("ublk %s: control closed: %w", q.op, os.ErrClosed)
	}
	if c.r == nil {
		if err := c.setup(); err != nil {
			return nil, fmt.Errorf("ublk %s: %w", q.op, err)
		}
	}
	n := max(len(q.in), q.outLen)
	cmd := ctrlCmd{DevID: q.devID, QueueID: noQueue, Data: q.data}
	if n > 0 {
		clear(c.page[:n])
		copy(c.page, q.in)
		cmd.Addr = uint64(uintptrOf(c.page))
		cmd.Len = uint16(n)
	}
	c.seq++
	tag := c.seq
	sqe := c.r.sqe()
	if sqe == nil {
		return nil, fmt.Errorf("ublk %s: %w", q.op, errRingFull)
	}
	cmd.marshal(prepURingCmd(sqe, int(c.f.Fd()), q.cmdOp, tag))
	if err := c.r.enter(0, 0); err != nil {
		return nil, fmt.Errorf("ublk %s: %w", q.op, err)
	}
	for {
		for {
			e, ok := c.r.peek()
			if !ok {
				break
			}
			c.r.advance()
			if e.UserData != tag {
				continue // a stale completion
			}
			if e.Res < 0 {
				id := int(int32(q.devID))
				return nil, &CmdError{Op: q.op, DevID: id, Errno: syscall.Errno(-e.Res)}
			}
			return append([]byte(nil), c.page[:q.outLen]...), nil
		}
		if err := ctx.Err(); err != nil {
			// The command stays in the kernel; tearing the ring down
			// cancels it. The next command sets up a fresh ring.
			c.teardown()
			return nil, fmt.Errorf("ublk %s: %w", q.op, err)
		}
		if err := c.r.enter(1, 100*time.Millisecond); err != nil {
			return nil, fmt.Errorf("ublk %s: %w", q.op, err)
		}
	}
}

func (c *control) getFeatures(ctx context.Context) (uint64, error) {
	b, err := c.do(ctx, ctrlReq{op: "GET_FEATURES", cmdOp: uCmdGetFeatures, devID: anyDev, outLen: featuresLen})
	if err != nil {
		return 0, err
	}
	return le.Uint64(b), nil
}

func (c *control) addDev(ctx context.Context, info *DevInfo) error {
	in := make([]byte, sizeofDevInfo)
	info.marshal(in)
	b, err := c.do(ctx, ctrlReq{op: "ADD_DEV", cmdOp: uCmdAddDev, devID: info.DevID, in: in, outLen: sizeofDevInfo})
	if err != nil {
		return err
	}
	info.unmarshal(b)
	return nil
}

func (c *control) getDevInfo(ctx context.Context, id uint32) (DevInfo, error) {
	var info DevInfo
	b, err := c.do(ctx, ctrlReq{op: "GET_DEV_INFO", cmdOp: uCmdGetDevInfo, devID: id, outLen: sizeofDevInfo})
	if err != nil {
		return info, err
	}
	info.unmarshal(b)
	return info, nil
}

func (c *control) setParams(ctx context.Context, id uint32, p *params) error {
	in := make([]byte, sizeofParams)
	p.marshal(in)
	_, err := c.do(ctx, ctrlReq{op: "SET_PARAMS", cmdOp: uCmdSetParams, devID: id, in: in[:paramsSetLength]})
	return err
}

func (c *control) getParams(ctx context.Context, id uint32) (params, error) {
	var p params
	in := make([]byte, sizeofParams)
	le.PutUint32(in, sizeofParams)
	b, err := c.do(ctx, ctrlReq{op: "GET_PARAMS", cmdOp: uCmdGetParams, devID: id, in: in, outLen: sizeofParams})
	if err != nil {
		return p, err
	}
	p.unmarshal(b)
	return p, nil
}

func (c *control) simple(ctx context.Context, op string, cmdOp, id uint32, data uint64) error {
	_, err := c.do(ctx, ctrlReq{op: op, cmdOp: cmdOp, devID: id, data: data})
	return err
}

func (c *control) startDev(ctx context.Context, id uint32) error {
	return c.simple(ctx, "START_DEV", uCmdStartDev, id, uint64(os.Getpid()))
}

func (c *control) stopDev(ctx context.Context, id uint32) error {
	return c.simple(ctx, "STOP_DEV", uCmdStopDev, id, 0)
}

func (c *control) delDev(ctx context.Context, id uint32) error {
	return c.simple(ctx, "DEL_DEV", uCmdDelDev, id, 0)
}

func (c *control) startRecovery(ctx context.Context, id uint32) error {
	return c.simple(ctx, "START_USER_RECOVERY", uCmdStartUserRecovery, id, 0)
}

func (c *control) endRecovery(ctx context.Context, id uint32) error {
	return c.simple(ctx, "END_USER_RECOVERY", uCmdEndUserRecovery, id, uint64(os.Getpid()))
}
