package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Lock is a volume's attach lock: RunDir/NAME.lock, flock(2)ed by the
// process that serves the volume for as long as it lives. The kernel drops
// the lock when that process ends, however it ends, so a held lock always
// means a live attach. The file says who holds it: "PID DEVICE".
type Lock struct {
	name string
	mu   sync.Mutex
	f    *os.File
}

// AttachedError says that another live process serves the volume.
type AttachedError struct {
	Name   string
	PID    int    // 0 when the holder did not say
	Device string // empty while the holder is still attaching
}

func (e *AttachedError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "pid " + strconv.Itoa(e.PID)
	}
	if e.Device == "" {
		return fmt.Sprintf("volume %s is already being attached by %s", e.Name, who)
	}
	return fmt.Sprintf("volume %s is already attached by %s (%s)", e.Name, who, e.Device)
}

func lockPath(name string) string { return filepath.Join(RunDir, name+".lock") }

// AcquireLock takes volume name's attach lock without waiting. When
// another live process holds it the error is an *AttachedError naming it.
func AcquireLock(name string) (*Lock, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("attach lock: %w", err)
	}
	f, err := os.OpenFile(lockPath(name), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("attach lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, holderError(name, f)
		}
		return nil, fmt.Errorf("attach lock %s: %w", f.Name(), err)
	}
	l := &Lock{name: name, f: f}
	if err := l.write(""); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// holderError reads who holds the lock. The holder writes its pid as soon
// as it has the lock; a reader in between sees an empty file.
func holderError(name string, f *os.File) error {
	e := &AttachedError{Name: name}
	for range 10 {
		b, err := os.ReadFile(f.Name())
		if err == nil && len(b) > 0 {
			fields := strings.Fields(string(b))
			if len(fields) > 0 {
				e.PID, _ = strconv.Atoi(fields[0])
			}
			if len(fields) > 1 {
				e.Device = fields[1]
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return e
}

func (l *Lock) write(device string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("attach lock %s: %w", l.name, os.ErrClosed)
	}
	line := strconv.Itoa(os.Getpid())
	if device != "" {
		line += " " + device
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("attach lock: %w", err)
	}
	if _, err := l.f.WriteAt([]byte(line+"\n"), 0); err != nil {
		return fmt.Errorf("attach lock: %w", err)
	}
	return nil
}

// SetDevice records the device the volume is attached as.
func (l *Lock) SetDevice(device string) error { return l.write(device) }

// Close releases the lock. The file stays: removing it would let two
// later attaches lock two different files. Idempotent.
func (l *Lock) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// CheckNotAttached fails with an *AttachedError when volume name is being
// served: its attach lock is held, or its control socket answers (a server
// that predates the lock). It takes nothing; the caller that goes on to
// attach takes the lock with AcquireLock.
func CheckNotAttached(ctx context.Context, name string) error {
	l, err := AcquireLock(name)
	if err != nil {
		return err
	}
	l.Close()
	return CheckSocket(ctx, name)
}

// CheckSocket fails with an *AttachedError when volume name's control
// socket answers: a server that predates the attach lock.
func CheckSocket(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := Query(ctx, SocketPath(name), Request{Op: "status"})
	if err == nil && resp.Status != nil {
		return &AttachedError{Name: name, PID: resp.Status.PID, Device: resp.Status.Device}
	}
	return nil
}
