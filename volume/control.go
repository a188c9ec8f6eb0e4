package volume

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// RunDir holds one control socket per attached volume.
var RunDir = "/run/iser-attach"

// Status describes an attached volume (list, status).
type Status struct {
	Name      string `json:"name"`
	Device    string `json:"device"`
	Portal    string `json:"portal"`
	Target    string `json:"target"`
	LUN       uint16 `json:"lun"`
	Transport string `json:"transport"`
	Frontend  string `json:"frontend"`
	// State is "attached", "recovering" (session lost, I/O waits),
	// "failed" (down longer than the replacement timeout: I/O gets EIO
	// while recovery goes on) or "detaching".
	State string `json:"state"`
	// Recoveries counts sessions reinstated after a fault; Faults counts
	// sessions lost; LastError is why the last one ended.
	Recoveries uint64   `json:"recoveries"`
	Faults     uint64   `json:"faults"`
	LastError  string   `json:"last_error,omitempty"`
	WWN        string   `json:"wwn,omitempty"`
	Link       string   `json:"link,omitempty"`
	PID        int      `json:"pid"`
	Since      string   `json:"since"`
	Counters   Counters `json:"counters"`
	// Kind is "serve" for a serve process (ListServe; Name is then its
	// export name and Listen its NBD listeners), empty for a volume.
	Kind   string   `json:"kind,omitempty"`
	Listen []string `json:"listen,omitempty"`
}

// Request is one control request (a JSON line).
type Request struct {
	Op    string `json:"op"` // "status" or "detach"
	Force bool   `json:"force,omitempty"`
}

// Response answers a Request (a JSON line).
type Response struct {
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
}

// Controller is what a control socket drives.
type Controller interface {
	Status() Status
	// Detach flushes, removes the device and logs out; it refuses while the
	// device is mounted unless force.
	Detach(ctx context.Context, force bool) error
}

// ControlServer serves one volume's control socket.
type ControlServer struct {
	path string
	ln   net.Listener
	c    Controller
	wg   sync.WaitGroup
	once sync.Once
}

// SocketPath is the control socket of volume name.
func SocketPath(name string) string { return filepath.Join(RunDir, name+".sock") }

// ValidName reports whether name can name a volume (and a socket file).
func ValidName(name string) error {
	if name == "" || len(name) > 64 || strings.HasPrefix(name, ".") {
		return fmt.Errorf("volume name %q: 1 to 64 characters, not starting with a dot", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("volume name %q: only letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// ListenControl creates the control socket for name. It fails when another
// process serves that name; a stale socket is replaced.
func ListenControl(name string, c Controller) (*ControlServer, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	path := SocketPath(name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if resp, err := Query(ctx, path, Request{Op: "status"}); err == nil && resp.Status != nil {
		return nil, fmt.Errorf("volume %s is already attached as %s (pid %d)", name, resp.Status.Device, resp.Status.PID)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	_ = os.Chmod(path, 0o600)
	s := &ControlServer{path: path, ln: ln, c: c}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *ControlServer) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(conn)
		}()
	}
}

func (s *ControlServer) handle(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return
	}
	var req Request
	resp := Response{}
	if err := json.Unmarshal(line, &req); err != nil {
		resp.Error = "bad request: " + err.Error()
	} else {
		switch req.Op {
		case "status":
			st := s.c.Status()
			resp.OK, resp.Status = true, &st
		case "detach":
			_ = conn.SetReadDeadline(time.Time{})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			err := s.c.Detach(ctx, req.Force)
			cancel()
			if err != nil {
				resp.Error = err.Error()
			} else {
				resp.OK = true
			}
		default:
			resp.Error = fmt.Sprintf("unknown op %q", req.Op)
		}
	}
	b, _ := json.Marshal(resp)
	_, _ = conn.Write(append(b, '\n'))
}

// Close stops serving and removes the socket. Idempotent.
func (s *ControlServer) Close() error {
	s.once.Do(func() {
		s.ln.Close()
		_ = os.Remove(s.path)
	})
	s.wg.Wait()
	return nil
}

// Query sends one request to a control socket.
func Query(ctx context.Context, path string, req Request) (Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return Response{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return Response{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return Response{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	return resp, nil
}

// List queries every control socket in RunDir. Sockets nobody serves any
// more are removed.
func List(ctx context.Context) ([]Status, error) {
	paths, err := filepath.Glob(filepath.Join(RunDir, "*.sock"))
	if err != nil {
		return nil, err
	}
	var out []Status
	for _, p := range paths {
		resp, err := Query(ctx, p, Request{Op: "status"})
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "connection refused") {
				_ = os.Remove(p)
			}
			continue
		}
		if resp.Status != nil {
			out = append(out, *resp.Status)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Find returns the control socket of the volume named nameOrDevice, or of
// the volume whose device is nameOrDevice (/dev/ublkb0, /dev/nbd1).
func Find(ctx context.Context, nameOrDevice string) (string, Status, error) {
	if !strings.HasPrefix(nameOrDevice, "/") {
		p := SocketPath(nameOrDevice)
		resp, err := Query(ctx, p, Request{Op: "status"})
		if err == nil && resp.Status != nil {
			return p, *resp.Status, nil
		}
	}
	all, err := List(ctx)
	if err != nil {
		return "", Status{}, err
	}
	for _, st := range all {
		if st.Device == nameOrDevice || st.Name == nameOrDevice {
			return SocketPath(st.Name), st, nil
		}
	}
	return "", Status{}, fmt.Errorf("no attached volume named or at %q", nameOrDevice)
}
