package volume

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Control sockets of serve processes: one per process, named by its PID in
// a directory of their own under RunDir, so that they cannot clash with
// the volumes' sockets (whatever a volume is named) and detach never finds
// them. They answer the same requests as a volume's (ControlServer).

// ServeDir is the directory of the serve processes' control sockets.
func ServeDir() string { return filepath.Join(RunDir, "serve") }

// ServeSocketPath is the control socket of the serve process pid.
func ServeSocketPath(pid int) string { return filepath.Join(ServeDir(), strconv.Itoa(pid)+".sock") }

// ListenServeControl creates this process's serve control socket,
// replacing a stale one (left by a process of the same PID).
func ListenServeControl(c Controller) (*ControlServer, error) {
	if err := os.MkdirAll(ServeDir(), 0o755); err != nil {
		return nil, fmt.Errorf("serve control socket: %w", err)
	}
	path := ServeSocketPath(os.Getpid())
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("serve control socket: %w", err)
	}
	_ = os.Chmod(path, 0o600)
	s := &ControlServer{path: path, ln: ln, c: c}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// ListServe queries every serve control socket, sorted by PID. Sockets
// nobody serves any more are removed.
func ListServe(ctx context.Context) ([]Status, error) {
	out, err := queryDir(ctx, ServeDir())
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}
