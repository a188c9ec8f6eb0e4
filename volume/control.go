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
	"syscall"
	"time"

	"github.com/iser-attach/iser-attach/blockdev/counting"
)

// Counters are a volume's I/O totals, as its counting backend keeps them.
type Counters = counting.Counters

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
	// ReadOnly: the frontend refuses writes (--read-only, read_only in
	// the volume file, or a write-protected LUN).
	ReadOnly bool `json:"read_only"`
	// State is "attached", "recovering" (session lost, I/O waits),
	// "failed" (down longer than the replacement timeout: I/O gets EIO
	// while recovery goes on) or "detaching".
	State string `json:"state"`
	// Recoveries counts sessions reinstated after a fault; Faults counts
	// sessions lost; LastError is why the last one ended.
	Recoveries uint64 `json:"recoveries"`
	Faults     uint64 `json:"faults"`
	// CommandTimeouts counts SCSI commands that got no status within the
	// command timeout (each then aborted, reset or reissued).
	CommandTimeouts uint64 `json:"command_timeouts"`
	LastError       string `json:"last_error,omitempty"`
	WWN             string `json:"wwn,omitempty"`
	// Initiator is the initiator name the session logged in with.
	Initiator string   `json:"initiator,omitempty"`
	Link      string   `json:"link,omitempty"`
	PID       int      `json:"pid"`
	Since     string   `json:"since"`
	Counters  Counters `json:"counters"`
	// Kind is "serve" for a serve process (ListServe), empty for a volume.
	// A serve process's Name is the one name of its export in list,
	// metrics and stats: the export name, or for the default export (whose
	// NBD name is empty) TARGET-lunN; Export is the NBD export name itself
	// and Listen its NBD listeners (Device joins them).
	Kind   string   `json:"kind,omitempty"`
	Export *string  `json:"export,omitempty"`
	Listen []string `json:"listen,omitempty"`
	// Paths holds each path of a volume with several portals (multipath),
	// in the configured order; none with one portal.
	Paths []PathStatus `json:"paths,omitempty"`
}

// PathStatus is one path of a multipath volume.
type PathStatus struct {
	Portal string `json:"portal"`
	// State is up, down, standby, unavailable, transitioning (ALUA),
	// checking (logged in, identity and ALUA state not read yet) or
	// refused (it leads to another logical unit).
	State string `json:"state"`
	// ALUA is the path's target port group's asymmetric access state, as
	// REPORT TARGET PORT GROUPS or a sense said; empty without ALUA.
	ALUA      string `json:"alua,omitempty"`
	IOs       uint64 `json:"ios"`
	InFlight  int64  `json:"in_flight"`
	Failovers uint64 `json:"failovers"` // commands moved from it to another path
	LastError string `json:"last_error,omitempty"`
}

// Request is one control request (a JSON line).
type Request struct {
	Op    string `json:"op"` // "status", "stats", "detach" or "resize"
	Force bool   `json:"force,omitempty"`
}

// Response answers a Request (a JSON line).
type Response struct {
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
	Stats  *Stats  `json:"stats,omitempty"`
	Resize *Resize `json:"resize,omitempty"`
}

// Resize is what a resize did: the LUN's capacity read again and the
// device set to it.
type Resize struct {
	Device  string `json:"device"`
	OldSize int64  `json:"old_size"` // bytes
	NewSize int64  `json:"new_size"`
}

// Resizer is a Controller that can follow its LUN's capacity: it reads
// READ CAPACITY again and sets the device's size (resize).
type Resizer interface {
	Resize(ctx context.Context) (Resize, error)
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
	ln, err := listenPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := &ControlServer{path: path, ln: ln, c: c}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// umaskMu serialises listenPrivate's umask changes (the umask is the
// process's).
var umaskMu sync.Mutex

// afterListen, when set (by tests), sees the socket right after it was
// bound.
var afterListen func(path string)

// listenPrivate binds a unix socket at path with mode 0600 from the
// start: bind(2) creates the file with 0777 less the umask, so the umask
// is 0177 for that call. A chmod after the bind would leave a moment in
// which anyone may connect.
func listenPrivate(path string) (net.Listener, error) {
	umaskMu.Lock()
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	umaskMu.Unlock()
	if err == nil && afterListen != nil {
		afterListen(path)
	}
	return ln, err
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
		case "stats":
			if st, err := stats(s.c); err != nil {
				resp.Error = err.Error()
			} else {
				resp.OK, resp.Stats = true, st
			}
		case "resize":
			r, ok := s.c.(Resizer)
			if !ok {
				resp.Error = "resize: this process cannot resize its device"
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			res, err := r.Resize(ctx)
			cancel()
			if err != nil {
				resp.Error = err.Error()
			} else {
				resp.OK, resp.Resize = true, &res
			}
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
	out, err := queryDir(ctx, RunDir)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// queryDir asks every control socket in dir for its status, in no
// particular order. Sockets nobody serves any more are removed; a socket
// that fails otherwise is skipped. The sockets are asked at once, each
// within ctx and at most socketAnswerTimeout: one daemon slow to answer
// (or stuck) must not use up ctx and hide every volume after it.
func queryDir(ctx context.Context, dir string) ([]Status, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return nil, err
	}
	answers := make([]*Status, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, socketAnswerTimeout)
			defer cancel()
			resp, err := Query(qctx, p, Request{Op: "status"})
			if err != nil {
				if errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "connection refused") {
					_ = os.Remove(p)
				}
				return
			}
			answers[i] = resp.Status
		}()
	}
	wg.Wait()
	var out []Status
	for _, st := range answers {
		if st != nil {
			out = append(out, *st)
		}
	}
	return out, nil
}

// socketAnswerTimeout bounds one control socket's status answer in a
// listing. A test shortens it.
var socketAnswerTimeout = 5 * time.Second

// Find returns the control socket of the volume named nameOrDevice, or of
// the volume whose device is nameOrDevice (/dev/ublkb0, /dev/nbd1).
// A stable name (LinkDir/NAME, LinkDir/by-wwn/WWN) finds its volume only
// when the volume it names is attached as the device it points at: a link
// a killed server left may point at a device number another volume has
// now.
func Find(ctx context.Context, nameOrDevice string) (string, Status, error) {
	if rel, err := filepath.Rel(LinkDir, nameOrDevice); err == nil && filepath.IsAbs(nameOrDevice) && !strings.HasPrefix(rel, "..") {
		return findLink(ctx, nameOrDevice)
	}
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

// findLink is Find for a stable name: the volume it names must be attached
// as the device the link points at.
func findLink(ctx context.Context, link string) (string, Status, error) {
	target := linkTarget(link)
	if target == "" {
		return "", Status{}, fmt.Errorf("%s is not a link to an attached volume's device", link)
	}
	all, err := List(ctx)
	if err != nil {
		return "", Status{}, err
	}
	base, byWWN := filepath.Base(link), filepath.Dir(link) == filepath.Join(LinkDir, "by-wwn")
	for _, st := range all {
		if (byWWN && st.WWN == base || !byWWN && st.Name == base) && st.Device == target {
			return SocketPath(st.Name), st, nil
		}
	}
	for _, st := range all {
		if st.Device == target {
			return "", Status{}, fmt.Errorf("%s is a stale link: it points at %s, which volume %s is attached as", link, target, st.Name)
		}
	}
	return "", Status{}, fmt.Errorf("%s is a stale link: no attached volume is %s", link, target)
}
