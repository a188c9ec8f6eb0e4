package nbdkernel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/iser-attach/iser-attach/nbd"
	"github.com/rs/zerolog"
)

// closeTimeout bounds the Detach that Close does.
const closeTimeout = 30 * time.Second

// Device is one /dev/nbdN attached to an export of an nbd.Server. Its
// methods are safe for concurrent use. Detach and Close are idempotent:
// the first call does the work, later and concurrent calls wait for it and
// return its result.
type Device struct {
	index  int
	path   string
	export string
	cl     *client
	sync   func(path string) error // syncDevice; the tests' fake has no device node
	log    zerolog.Logger

	conns   []net.Conn         // server ends of the sockets; closed to force an end
	stop    context.CancelFunc // stops the connections' readers (graceful)
	serving sync.WaitGroup     // one per ServeTransmission goroutine
	started bool               // serve has run
	done    chan struct{}      // closed when every connection has ended

	mu        sync.Mutex
	connErrs  []error
	detaching bool
	detached  chan struct{} // closed when the first Detach has finished
	detachErr error
}

// Attach configures a /dev/nbdN whose sockets srv serves for the named
// export ("" is the default export, as in the NBD handshake). It creates
// Options.Connections socket pairs, starts one goroutine per pair that
// serves the server end with srv.ServeTransmission, and hands the other
// ends to the kernel with NBD_CMD_CONNECT, which takes references to them.
// ctx bounds the netlink requests; it does not limit the device's life.
//
// Attach needs CAP_SYS_ADMIN and the nbd module; without the module it
// returns an *UnsupportedError (errors.Is(err, ErrNotSupported)).
// Kernel errors are syscall.Errno in the chain: EBUSY when Options.Index
// names a device in use, EINVAL for a configuration the driver refuses.
func Attach(ctx context.Context, srv *nbd.Server, export string, opt Options) (*Device, error) {
	return attach(ctx, netlinkTransport{}, syncDevice, srv, export, opt)
}

func attach(ctx context.Context, tr transport, syncFn func(string) error, srv *nbd.Server, export string, opt Options) (*Device, error) {
	info, err := srv.ExportInfo(export)
	if err != nil {
		return nil, fmt.Errorf("nbd kernel attach: %w", err)
	}
	cfg, err := opt.config(info)
	if err != nil {
		return nil, fmt.Errorf("nbd kernel attach %q: %w", export, err)
	}
	cl, err := dial(ctx, tr)
	if err != nil {
		return nil, fmt.Errorf("nbd kernel attach %q: %w", export, err)
	}

	d := &Device{
		export:   export,
		cl:       cl,
		sync:     syncFn,
		log:      opt.Logger.With().Str("export", info.Name).Logger(),
		done:     make(chan struct{}),
		detached: make(chan struct{}),
	}
	// The kernel ends stay open only until NBD_CMD_CONNECT has returned:
	// by then the driver holds its own references.
	for i := range cfg.fds {
		cfg.fds[i] = -1
	}
	closeKernelEnds := func() {
		for i, fd := range cfg.fds {
			if fd >= 0 {
				syscall.Close(fd)
				cfg.fds[i] = -1
			}
		}
	}
	defer closeKernelEnds()
	for i := range cfg.fds {
		kfd, nc, err := socketPair()
		if err != nil {
			closeKernelEnds()
			d.abort()
			return nil, fmt.Errorf("nbd kernel attach %q: socket %d: %w", export, i, err)
		}
		cfg.fds[i] = kfd
		d.conns = append(d.conns, nc)
	}
	// Serve before connecting: the driver may read (a partition scan) as
	// soon as the device is configured.
	d.serve(srv, export)

	index, err := cl.connect(ctx, cfg)
	if err != nil {
		if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && cfg.index >= 0 {
			// The kernel may have configured the device before the request
			// was abandoned; do not leave it bound to dead sockets.
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl.disconnect(dctx, cfg.index)
			cancel()
		}
		closeKernelEnds()
		d.abort()
		if errors.Is(err, syscall.EPERM) {
			err = fmt.Errorf("%w (attaching needs CAP_SYS_ADMIN)", err)
		}
		return nil, fmt.Errorf("nbd kernel attach %q: %w", export, err)
	}
	d.index = index
	d.path = DevicePath(index)
	d.log = d.log.With().Str("device", d.path).Logger()
	d.log.Info().Int("connections", len(cfg.fds)).Uint64("size", cfg.sizeBytes).
		Uint64("block_size", cfg.blockSizeBytes).Uint64("server_flags", cfg.serverFlags).
		Msg("nbd device attached")
	return d, nil
}

// socketPair returns a connected pair of Unix stream sockets: a raw fd for
// the kernel and a net.Conn for the server.
func socketPair() (int, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("socketpair: %w", err)
	}
	f := os.NewFile(uintptr(fds[1]), "nbd-server")
	nc, err := net.FileConn(f) // dups the fd
	f.Close()
	if err != nil {
		syscall.Close(fds[0])
		return -1, nil, fmt.Errorf("socketpair: %w", err)
	}
	return fds[0], nc, nil
}

// serve starts one goroutine per connection, owned by the Device, and one
// that closes done after the last of them.
func (d *Device) serve(srv *nbd.Server, export string) {
	d.started = true
	ctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	for i, nc := range d.conns {
		d.serving.Add(1)
		go func() {
			defer d.serving.Done()
			err := srv.ServeTransmission(ctx, nc, export)
			if err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
				d.mu.Lock()
				d.connErrs = append(d.connErrs, fmt.Errorf("connection %d: %w", i, err))
				d.mu.Unlock()
				d.log.Warn().Err(err).Int("connection", i).Msg("nbd device connection failed")
			}
		}()
	}
	go func() { // owned by the Device: ends after the last connection
		d.serving.Wait()
		close(d.done)
	}()
}

// abort ends the connections of a device that never got configured: the
// readers stop, then the sockets close.
func (d *Device) abort() {
	if !d.started {
		for _, nc := range d.conns {
			nc.Close()
		}
		close(d.done)
		return
	}
	d.stop()
	<-d.done
	for _, nc := range d.conns {
		nc.Close() // already closed by ServeTransmission; harmless
	}
}

// Path is the device node, "/dev/nbdN".
func (d *Device) Path() string { return d.path }

// Index is N of /dev/nbdN.
func (d *Device) Index() int { return d.index }

// Done is closed when every connection of the device has ended: after
// Detach, after the device was disconnected by someone else (nbd-client
// -d, another netlink client), or when the server was closed. The device
// stays configured (I/O fails) until Detach.
func (d *Device) Done() <-chan struct{} { return d.done }

// Err reports the connections that ended with an error, joined; nil while
// they run and after clean disconnects.
func (d *Device) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(d.connErrs...)
}

// Detach takes the device down:
//
//  1. it syncs the device (open, fsync, close): dirty page-cache data
//     is written and NBD_CMD_FLUSH reaches the export;
//  2. NBD_CMD_DISCONNECT: the driver sends NBD_CMD_DISC on every socket,
//     shuts the sockets down and fails any I/O still queued (EIO);
//  3. it waits for every connection to end: the server answers what it
//     had read and returns;
//  4. it waits until NBD_CMD_STATUS reports the device unconfigured (size
//     0, free for the next Attach). A device still mounted or held open
//     stays configured until it is released.
//
// Detach expects an idle device: unmount file systems first. If ctx ends,
// Detach stops waiting: it closes the server ends of the sockets (the
// driver then fails pending I/O) and returns ctx's error; a Backend call
// still running keeps its connection goroutine until it returns (see
// Done). The result joins every failure.
func (d *Device) Detach(ctx context.Context) error {
	d.mu.Lock()
	if d.detaching {
		d.mu.Unlock()
		select {
		case <-d.detached:
			return d.detachErr
		case <-ctx.Done():
			return fmt.Errorf("nbd detach %s: %w", d.path, ctx.Err())
		}
	}
	d.detaching = true
	d.mu.Unlock()

	err := d.detach(ctx)
	d.detachErr = err // published by closing detached
	close(d.detached)
	return err
}

func (d *Device) detach(ctx context.Context) error {
	var errs []error

	synced := make(chan error, 1)
	go func() { synced <- d.sync(d.path) }() // owned by detach, which receives below
	syncDone := false
	select {
	case err := <-synced:
		syncDone = true
		if err != nil {
			d.log.Warn().Err(err).Msg("nbd detach: sync failed")
		}
	case <-ctx.Done():
	}

	if err := d.cl.disconnect(ctx, d.index); err != nil {
		errs = append(errs, err)
	}

	select {
	case <-d.done:
	case <-ctx.Done():
		d.stop()
		for _, nc := range d.conns {
			nc.Close()
		}
		errs = append(errs, fmt.Errorf("waiting for the connections: %w", ctx.Err()))
	}
	if !syncDone {
		// The disconnect (or the closed sockets) failed the sync's I/O.
		<-synced
	}

	if err := d.waitUnbound(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := d.Err(); err != nil {
		errs = append(errs, err)
	}
	d.stop() // release the context; the connections have ended or were told to
	if len(errs) > 0 {
		return fmt.Errorf("nbd detach %s: %w", d.path, errors.Join(errs...))
	}
	d.log.Info().Msg("nbd device detached")
	return nil
}

// syncDevice writes the device's dirty pages and flushes its cache.
func syncDevice(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// waitUnbound polls NBD_CMD_STATUS until the device has no configuration.
func (d *Device) waitUnbound(ctx context.Context) error { return d.cl.waitUnbound(ctx, d.index) }

// Close detaches the device if Detach has not been called, giving it 30
// seconds; otherwise it waits for that Detach. It returns Detach's result.
func (d *Device) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return d.Detach(ctx)
}

// Devices lists the kernel's nbd devices (NBD_CMD_STATUS without an
// index). It returns an *UnsupportedError when the nbd module is missing.
func Devices(ctx context.Context) ([]DeviceStatus, error) {
	cl, err := dial(ctx, netlinkTransport{})
	if err != nil {
		return nil, fmt.Errorf("nbd devices: %w", err)
	}
	st, err := cl.status(ctx, -1)
	if err != nil {
		return nil, fmt.Errorf("nbd devices: %w", err)
	}
	return st, nil
}
