package ublk

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iser-attach/iser-attach/internal/proc"
)

// Device is one ublk device served by this process: /dev/ublkbN, backed by a
// Backend. Create or Recover makes one; Close (or Stop) removes the device,
// Detach leaves it to a later Recover. All methods are safe for concurrent
// use; Close, Stop and Detach are idempotent (the first one decides) and
// unblock Done.
type Device struct {
	id       int
	info     DevInfo
	b        Backend
	ctrl     *control
	features uint64 // the driver's GET_FEATURES
	char     *os.File
	readOnly bool // UBLK_ATTR_READ_ONLY: the queues refuse writes
	noDefer  bool // DeviceOptions.NoDeferTaskrun
	queues   []*queue
	st       stats
	ctx      context.Context // backend calls; cancelled when shutdown gives up on them
	cancel   context.CancelFunc
	done     chan struct{} // closed when every queue loop has ended
	doneOnce sync.Once
	endOnce  sync.Once
	endErr   error
}

// BlockPath is the block device node of device id.
func BlockPath(id int) string { return "/dev/ublkb" + strconv.Itoa(id) }

// CharPath is the character device node of device id.
func CharPath(id int) string { return "/dev/ublkc" + strconv.Itoa(id) }

// Create adds a new ublk device for b, starts serving it and returns once
// the kernel has added the disk (/dev/ublkbN exists). ctx bounds the setup.
// On kernels without what it needs it returns a *KernelError (see
// Supported).
func Create(ctx context.Context, b Backend, opt DeviceOptions) (*Device, error) {
	g, err := opt.resolve(b)
	if err != nil {
		return nil, err
	}
	c, features, err := openChecked(ctx)
	if err != nil {
		return nil, err
	}
	// Online resize where the driver has it (Linux >= 6.16); batch I/O
	// (Linux >= 7.0) unless told not to.
	g.flags |= features & FlagUpdateSize
	if !opt.NoBatch {
		g.flags |= features & FlagBatchIO
	}
	info := DevInfo{
		NrHWQueues:    uint16(g.queues),
		QueueDepth:    uint16(g.depth),
		MaxIOBufBytes: uint32(g.maxIO),
		DevID:         anyDev,
		ServerPID:     int32(os.Getpid()),
		Flags:         g.flags,
	}
	if opt.FixedID {
		info.DevID = uint32(opt.ID)
	}
	if err := c.addDev(ctx, &info); err != nil {
		c.close()
		return nil, fmt.Errorf("ublk create: %w", err)
	}
	d := newDevice(c, b, info)
	d.features = features
	d.readOnly = g.p.Attrs&attrReadOnly != 0
	d.noDefer = opt.NoDeferTaskrun
	fail := func(err error) (*Device, error) {
		d.teardown(context.Background(), true)
		return nil, fmt.Errorf("ublk create dev %d: %w", d.id, err)
	}
	if info.MaxIOBufBytes < uint32(os.Getpagesize()) || info.QueueDepth == 0 || info.NrHWQueues == 0 {
		return fail(fmt.Errorf("driver answered ADD_DEV with %+v", info))
	}
	// The driver may have lowered queues (to the CPUs) and max I/O (to a
	// page multiple); max_sectors must follow.
	g.p.MaxSectors = min(g.p.MaxSectors, info.MaxIOBufBytes>>9)
	if err := c.setParams(ctx, uint32(d.id), &g.p); err != nil {
		return fail(err)
	}
	if err := d.attach(ctx); err != nil {
		return fail(err)
	}
	if err := c.startDev(ctx, uint32(d.id)); err != nil {
		return fail(err)
	}
	if err := ensureNode(BlockPath(d.id), "/sys/class/block/ublkb"+strconv.Itoa(d.id)+"/dev", unix.S_IFBLK); err != nil {
		return fail(err)
	}
	return d, nil
}

// Recover attaches b to device id, left behind by a server that died or
// detached (UBLK_F_USER_RECOVERY): START_USER_RECOVERY, new FETCHes on every
// tag, END_USER_RECOVERY. Requests the old server had not completed are
// reissued to b (UBLK_F_USER_RECOVERY_REISSUE); a filesystem mounted on
// /dev/ublkbN stays mounted. The queue count, depth and largest request are
// the device's own; opt supplies only ReadOnly, which must be the device's
// (its read-only attribute cannot change: a device created writable is not
// taken over read-only, nor the other way round). b must be the same disk:
// its size and block size are checked against the device's parameters.
// START_USER_RECOVERY is retried while the driver reports the old server
// still present (EBUSY), until ctx ends (30 s when ctx has no deadline).
func Recover(ctx context.Context, id int, b Backend, opt DeviceOptions) (*Device, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	c, features, err := openChecked(ctx)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Device, error) {
		c.close()
		return nil, fmt.Errorf("ublk recover dev %d: %w", id, err)
	}
	info, err := c.getDevInfo(ctx, uint32(id))
	if err != nil {
		return fail(err)
	}
	if err := checkUnserved(info); err != nil {
		return fail(err)
	}
	if info.Flags&FlagUserRecovery == 0 {
		return fail(errors.New("device was created without UBLK_F_USER_RECOVERY"))
	}
	p, err := c.getParams(ctx, uint32(id))
	if err != nil {
		return fail(err)
	}
	if int64(p.DevSectors)<<9 != b.Size() || p.LogicalBSShift != uint8(bits.TrailingZeros32(b.BlockSize())) {
		return fail(fmt.Errorf("backend is %d bytes in %d-byte blocks, the device %d in %d",
			b.Size(), b.BlockSize(), int64(p.DevSectors)<<9, 1<<p.LogicalBSShift))
	}
	ro := p.Attrs&attrReadOnly != 0
	if want := opt.ReadOnly || b.ReadOnly(); ro != want {
		is, wanted := "writable", "read-only"
		if ro {
			is, wanted = wanted, is
		}
		return fail(fmt.Errorf("device is %s, wanted %s (fixed when it was created)", is, wanted))
	}
	for {
		err = c.startRecovery(ctx, uint32(id))
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("%w (the old server still holds %s)", err, CharPath(id)))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return fail(err)
	}
	d := newDevice(c, b, info)
	d.features = features
	d.readOnly = ro
	d.noDefer = opt.NoDeferTaskrun
	if err := d.attach(ctx); err != nil {
		d.teardown(context.Background(), false)
		return nil, fmt.Errorf("ublk recover dev %d: %w", id, err)
	}
	if err := c.endRecovery(ctx, uint32(id)); err != nil {
		d.teardown(context.Background(), false)
		return nil, fmt.Errorf("ublk recover dev %d: %w", id, err)
	}
	return d, nil
}

// Remove stops and deletes device id (STOP_DEV, DEL_DEV), a device a dead
// server left behind: I/O held for recovery fails. It refuses (ErrServed)
// a device whose server is alive.
func Remove(ctx context.Context, id int) error {
	c, _, err := openChecked(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	info, err := c.getDevInfo(ctx, uint32(id))
	if err != nil {
		return fmt.Errorf("ublk remove: %w", err)
	}
	if err := checkUnserved(info); err != nil {
		return fmt.Errorf("ublk remove dev %d: %w", id, err)
	}
	if err := c.stopDev(ctx, uint32(id)); err != nil {
		return fmt.Errorf("ublk remove: %w", err)
	}
	if err := c.delDev(ctx, uint32(id)); err != nil {
		return fmt.Errorf("ublk remove: %w", err)
	}
	return nil
}

// ErrServed is wrapped when a device is still served by a live process:
// it is neither taken over nor removed.
var ErrServed = errors.New("device is served by a live process")

// checkUnserved fails when the device is live and its server (the pid
// START_DEV or END_USER_RECOVERY recorded) is a live process other than
// this one. A dead server's device stays live until the driver notices
// (it then quiesces it for recovery), so only the process tells.
func checkUnserved(info DevInfo) error {
	pid := int(info.ServerPID)
	if info.State != stateLive || pid <= 0 || pid == os.Getpid() || !proc.Alive(pid) {
		return nil
	}
	return fmt.Errorf("%w: pid %d serves %s", ErrServed, pid, CharPath(int(info.DevID)))
}

// openChecked opens the control device and checks the driver's features,
// which it returns.
func openChecked(ctx context.Context) (*control, uint64, error) {
	c, err := openControl()
	if err != nil {
		return nil, 0, classifyOpenErr(err)
	}
	f, err := c.getFeatures(ctx)
	if err == nil {
		err = checkFeatures(f)
	} else {
		err = classifyFeaturesErr(err)
	}
	if err != nil {
		c.close()
		return nil, 0, err
	}
	return c, f, nil
}

func newDevice(c *control, b Backend, info DevInfo) *Device {
	ctx, cancel := context.WithCancel(context.Background())
	return &Device{id: int(info.DevID), info: info, b: b, ctrl: c, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// attach opens /dev/ublkcN, maps each queue's descriptors, allocates the
// buffers and starts the queue loops; it returns once every queue has sent
// its FETCHes.
func (d *Device) attach(ctx context.Context) error {
	charPath := CharPath(d.id)
	if err := ensureNode(charPath, "/sys/class/ublk-char/ublkc"+strconv.Itoa(d.id)+"/dev", unix.S_IFCHR); err != nil {
		return err
	}
	f, err := os.OpenFile(charPath, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err // *fs.PathError names the operation and the path
	}
	d.char = f
	depth, maxIO, page := int(d.info.QueueDepth), int(d.info.MaxIOBufBytes), os.Getpagesize()
	maxXfer := int(d.b.MaxTransfer())
	if maxXfer >= maxIO {
		maxXfer = 0
	}
	for i := 0; i < int(d.info.NrHWQueues); i++ {
		bufs, err := newIOBuffers(d.b, depth, maxIO)
		if err != nil {
			return err
		}
		q, err := newQueue(i, depth, int(f.Fd()), page, d.b, bufs)
		if err != nil {
			bufs.free()
			return err
		}
		q.ctx, q.st, q.maxXfer, q.readOnly = d.ctx, &d.st, maxXfer, d.readOnly
		q.batch = d.info.Flags&FlagBatchIO != 0
		q.noDefer = d.noDefer
		d.queues = append(d.queues, q)
		go q.run()
		select {
		case err := <-q.ready:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("ublk queue %d setup: %w", i, ctx.Err())
		}
	}
	go d.watch()
	return nil
}

// watch closes done when every queue loop has ended. Owned by the Device;
// it ends with the last queue.
func (d *Device) watch() {
	for _, q := range d.queues {
		<-q.exited
	}
	d.closeDone()
}

func (d *Device) closeDone() { d.doneOnce.Do(func() { close(d.done) }) }

// ID is the device number N of /dev/ublkbN.
func (d *Device) ID() int { return d.id }

// BlockPath is /dev/ublkbN.
func (d *Device) BlockPath() string { return BlockPath(d.id) }

// CharPath is /dev/ublkcN.
func (d *Device) CharPath() string { return CharPath(d.id) }

// Info is the device information the driver returned at ADD_DEV or
// GET_DEV_INFO (queues, depth, largest request, flags).
func (d *Device) Info() DevInfo { return d.info }

// Features is the driver's GET_FEATURES, read when the device was created
// or recovered.
func (d *Device) Features() uint64 { return d.features }

// ErrNoResize is wrapped by Resize on a kernel without UBLK_F_UPDATE_SIZE.
var ErrNoResize = &KernelError{Feature: "UBLK_F_UPDATE_SIZE", MinVersion: "6.16"}

// Resize sets the device's size to size bytes (UBLK_U_CMD_UPDATE_SIZE, the
// new size in 512-byte sectors): the kernel changes the disk's capacity and
// sends a change uevent; a filesystem on it is left alone. size must be a
// positive multiple of the logical block size, and the backend must serve
// it already (Backend.Size). On a kernel without UBLK_F_UPDATE_SIZE
// (before 6.16) it fails with a *KernelError and nothing changes.
func (d *Device) Resize(ctx context.Context, size int64) error {
	if d.features&FlagUpdateSize == 0 {
		return fmt.Errorf("ublk resize dev %d: %w", d.id, ErrNoResize)
	}
	bs := int64(d.b.BlockSize())
	if size <= 0 || size%bs != 0 || size%512 != 0 {
		return fmt.Errorf("ublk resize dev %d: %d bytes is not a positive multiple of %d", d.id, size, bs)
	}
	if _, err := d.ctrl.do(ctx, updateSizeReq(d.id, size)); err != nil {
		return fmt.Errorf("ublk resize: %w", err)
	}
	return nil
}

// updateSizeReq is UPDATE_SIZE of device id to size bytes: data[0] is the
// new size in 512-byte sectors (ublk_ctrl_set_size sets dev_sectors).
func updateSizeReq(id int, size int64) ctrlReq {
	return ctrlReq{op: "UPDATE_SIZE", cmdOp: uCmdUpdateSize, devID: uint32(id), data: uint64(size) >> 9}
}

// Stats returns the request counters.
func (d *Device) Stats() Stats { return d.st.snapshot() }

// Done is closed when the device is no longer served by this process:
// after Close, Stop or Detach, or when the driver removed the device under
// us (someone else's STOP_DEV).
func (d *Device) Done() <-chan struct{} { return d.done }

// Err reports why the queues ended on their own, after Done.
func (d *Device) Err() error {
	for _, q := range d.queues {
		select {
		case <-q.exited:
			if q.err != nil {
				return q.err
			}
		default:
		}
	}
	return nil
}

// Stop removes the device: STOP_DEV (the kernel completes the I/O in flight
// through us and deletes the disk), the queues end, then DEL_DEV. When ctx
// ends first, backend calls still running are cancelled and the device is
// deleted anyway.
func (d *Device) Stop(ctx context.Context) error {
	d.endOnce.Do(func() { d.endErr = d.teardown(ctx, true) })
	return d.endErr
}

// ErrOpen is wrapped by StopIfUnused when the kernel refused to stop the
// device because it is open.
var ErrOpen = errors.New("the block device is open")

// StopIfUnused is Stop, made safe against a user who opens the device at the
// last moment where the driver offers UBLK_F_SAFE_STOP_DEV (Linux >= 7.0):
// UBLK_U_CMD_TRY_STOP_DEV stops the device only while nobody has the disk
// open, and no open succeeds after it; while it is open it fails with
// ErrOpen (EBUSY) and the device stays served. Without the feature it is
// Stop: the caller's own check for users is all there is.
func (d *Device) StopIfUnused(ctx context.Context) error {
	if d.features&FlagSafeStopDev != 0 {
		err := d.ctrl.simple(ctx, "TRY_STOP_DEV", uCmdTryStopDev, uint32(d.id), 0)
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("ublk stop: %w: %w", ErrOpen, err)
		}
		// Any other failure: Stop decides (it may have been stopped already).
	}
	return d.Stop(ctx)
}

// Close is Stop with a 30-second limit.
func (d *Device) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.Stop(ctx)
}

// DetachTimeout bounds Detach: how long the backend calls in flight may
// take to return before they are cancelled and abandoned.
const DetachTimeout = 10 * time.Second

// Detach is DetachContext with DetachTimeout.
func (d *Device) Detach() error {
	ctx, cancel := context.WithTimeout(context.Background(), DetachTimeout)
	defer cancel()
	return d.DetachContext(ctx)
}

// DetachContext stops serving the device but leaves it in the kernel, for
// Recover in this or another process: requests queue up in the kernel
// meanwhile, and the ones in flight now are reissued to the recovering
// server (they are never completed here). Backend calls in flight are
// waited for until ctx ends, their results dropped; then they are
// cancelled and abandoned (their buffers are freed only once they return).
// It returns soon after ctx ends, whatever the backend does.
func (d *Device) DetachContext(ctx context.Context) error {
	d.endOnce.Do(func() { d.endErr = d.teardown(ctx, false) })
	return d.endErr
}

// teardown ends the device. With remove: STOP_DEV first so the driver
// completes what is in flight and aborts the FETCHes, then the queues end,
// then DEL_DEV once the char device is closed (the driver waits for that).
// Without remove: the queues are told to quit, each closes its ring on its
// own thread (the one the driver bound the queue to), and the driver
// quiesces the device for recovery. Either way, once ctx ends the queues
// stop waiting for backend calls, which are cancelled. Then, in this order
// (the one ublksrv follows): every ring is closed, the descriptor mappings
// go, the char device is closed, once, by this goroutine.
func (d *Device) teardown(ctx context.Context, remove bool) error {
	var errs []error
	if remove && len(d.queues) > 0 {
		if err := d.ctrl.stopDev(ctx, uint32(d.id)); err != nil && !errors.Is(err, syscall.ENODEV) {
			errs = append(errs, err)
		}
		// The driver aborts every FETCH once the disk is gone; wait for the
		// loops a little, then make them quit.
		select {
		case <-d.done:
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
	}
	for _, q := range d.queues {
		q.stop()
	}
	if !d.waitQueues(ctx) {
		for _, q := range d.queues {
			q.abandon()
		}
		d.cancel() // give up on backend calls
		d.waitQueues(context.Background())
	}
	d.closeDone()
	d.cancel()
	for _, q := range d.queues {
		q.release()
	}
	if d.char != nil {
		if err := d.char.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", d.CharPath(), err))
		}
	}
	if remove {
		if err := d.ctrl.delDev(ctx, uint32(d.id)); err != nil && !errors.Is(err, syscall.ENODEV) {
			errs = append(errs, err)
		}
	}
	if err := d.ctrl.close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitQueues waits until every queue loop has ended, or ctx has; it
// reports whether they all ended.
func (d *Device) waitQueues(ctx context.Context) bool {
	for _, q := range d.queues {
		select {
		case <-q.exited:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// ensureNode makes the device node path from the "major:minor" in sysDev
// when it is missing (a system without devtmpfs or udev); with devtmpfs it
// already exists, or appears within a moment.
func ensureNode(path, sysDev string, mode uint32) error {
	for i := 0; i < 20; i++ {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(sysDev)
	if err != nil {
		return fmt.Errorf("device node %s missing and %w", path, err)
	}
	var maj, min uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &maj, &min); err != nil {
		return fmt.Errorf("parse %s: %w", sysDev, err)
	}
	if err := unix.Mknod(path, mode|0o600, int(unix.Mkdev(maj, min))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("mknod %s: %w", path, err)
	}
	return nil
}
