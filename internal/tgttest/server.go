package tgttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ipcDir is where tgt 1.0.85 puts its management sockets; it is compiled
// into tgtd and tgtadm.
const ipcDir = "/var/run/tgtd"

// Server is one running tgtd with its targets. Its methods are safe for
// concurrent use. Close stops tgtd; it is idempotent.
type Server struct {
	cfg     Config
	dir     string
	ownDir  bool
	tgtd    string
	tgtadm  string
	ctlPort int // set by Launch only: Restart keeps it
	port    int // set by Launch only: Restart keeps it

	// life serializes Restart and Close, which replace or end p.
	life sync.Mutex
	mu   sync.Mutex
	p    *proc // the current (or last) tgtd process
	// stopped says that p was killed on purpose (by a Restart that could
	// not start tgtd again), so that Close does not report a crash.
	stopped bool
	closed  bool

	closeOnce sync.Once
	closeErr  error
	marker    atomic.Int64
}

// proc is one tgtd process. Restart replaces it.
type proc struct {
	cmd      *exec.Cmd
	exited   chan struct{} // closed when tgtd has been waited for
	waitErr  error         // valid after exited is closed
	readDone chan struct{} // closed when the output reader has seen EOF
	tr       *tracer       // parses this process's output
}

// cur returns the current tgtd process.
func (s *Server) cur() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// Launch starts tgtd on 127.0.0.1 with a free iSCSI port and a free control
// port, and creates cfg's targets. ctx bounds the start-up only. The caller
// must Close the Server.
func Launch(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.normalize(); err != nil {
		return nil, fmt.Errorf("tgttest: launch: %w", err)
	}
	tgtd, err := lookBin("tgtd")
	if err != nil {
		return nil, fmt.Errorf("tgttest: launch: %w", err)
	}
	tgtadm, err := lookBin("tgtadm")
	if err != nil {
		return nil, fmt.Errorf("tgttest: launch: %w", err)
	}
	s := &Server{cfg: cfg, dir: cfg.Dir, tgtd: tgtd, tgtadm: tgtadm}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "tgttest-"); err != nil {
			return nil, fmt.Errorf("tgttest: launch: %w", err)
		}
		s.ownDir = true
	}
	if err := s.createBackingFiles(); err != nil {
		s.removeDir()
		return nil, fmt.Errorf("tgttest: launch: %w", err)
	}
	if err := s.startTgtd(ctx); err != nil {
		s.removeDir()
		return nil, fmt.Errorf("tgttest: launch: %w", err)
	}
	if err := s.configure(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("tgttest: launch: %w", err)
	}
	return s, nil
}

// lookBin finds a tgt program in PATH or in /usr/sbin and /sbin, which are
// not in every PATH.
func lookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (try: apt-get install tgt)", name)
}

func (s *Server) createBackingFiles() error {
	for i := range s.cfg.Targets {
		t := &s.cfg.Targets[i]
		for j := range t.LUNs {
			l := &t.LUNs[j]
			if l.Path == "" {
				l.Path = filepath.Join(s.dir, fmt.Sprintf("tid%d-lun%d.img", i+1, j+1))
			}
			f, err := os.OpenFile(l.Path, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return fmt.Errorf("create backing file: %w", err)
			}
			fi, err := f.Stat()
			if err == nil && fi.Size() < l.Size {
				err = f.Truncate(l.Size)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("size backing file %s: %w", l.Path, err)
			}
			if l.Size == 0 {
				l.Size = fi.Size()
			}
			if l.Size == 0 || l.Size%int64(l.BlockSize) != 0 {
				return fmt.Errorf("backing file %s: size %d is not a positive multiple of %d", l.Path, l.Size, l.BlockSize)
			}
		}
	}
	return nil
}

func (s *Server) removeDir() {
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

// errRetry marks a start-up failure that another control port or iSCSI
// port may cure.
var errRetry = errors.New("port taken")

func (s *Server) startTgtd(ctx context.Context) error {
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		err = s.tryStart(ctx)
		if err == nil || !errors.Is(err, errRetry) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another
// process may take it before tgtd binds it; tryStart detects that.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pickPort is freePort; tests replace it to force a port clash.
var pickPort = freePort

func (s *Server) tryStart(ctx context.Context) error {
	port, err := pickPort()
	if err != nil {
		return err
	}
	// Control ports (0..32767) only name a unix socket (/var/run/tgtd/socket.N) and
	// its lock file; pick from a range nobody types by hand.
	s.ctlPort = 10000 + rand.IntN(22768)
	s.port = port
	return s.spawn(ctx)
}

// spawn starts tgtd on s.ctlPort and s.port, makes it the current process
// and waits until it serves the portal. On error it is gone again.
func (s *Server) spawn(ctx context.Context) error {
	port := s.port
	args := []string{"-f", "-C", strconv.Itoa(s.ctlPort)}
	if s.cfg.Trace {
		args = append(args, "-d", "1")
	}
	args = append(args, "--iscsi", fmt.Sprintf("portal=127.0.0.1:%d", port))
	cmd := exec.Command(s.tgtd, args...)
	cmd.Dir = s.dir
	// tgtd must not outlive a test binary that dies in a panic or timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start tgtd: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start tgtd: %w", err)
	}
	pw.Close()
	p := &proc{cmd: cmd, exited: make(chan struct{}), readDone: make(chan struct{}), tr: newTracer()}
	go func() {
		defer close(p.readDone)
		defer pr.Close()
		p.tr.run(pr, s.cfg.Log)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()

	if err := s.waitReady(ctx, p); err != nil {
		s.kill(p)
		return err
	}
	return nil
}

// waitReady polls tgtadm until tgtd answers, then checks that it serves
// exactly the portal asked for: when tgtd cannot bind the --iscsi portal it
// falls back to 0.0.0.0:3260 instead of exiting.
func (s *Server) waitReady(ctx context.Context, p *proc) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.exited:
			<-p.readDone
			tail := strings.Join(p.tr.lastLines(), "\n")
			if strings.Contains(tail, "another tgtd is using") {
				return fmt.Errorf("control port %d: %w", s.ctlPort, errRetry)
			}
			return fmt.Errorf("tgtd exited during start-up (%v):\n%s", p.waitErr, tail)
		case <-ctx.Done():
			return fmt.Errorf("wait for tgtd: %w", ctx.Err())
		case <-tick.C:
		}
		if _, err := s.run(ctx, false, "--mode", "system", "--op", "show"); err != nil {
			continue
		}
		out, err := s.Tgtadm(ctx, "--mode", "portal", "--op", "show")
		if err != nil {
			return fmt.Errorf("wait for tgtd: %w", err)
		}
		want := fmt.Sprintf("Portal: 127.0.0.1:%d,1", s.port)
		if strings.TrimSpace(out) != want {
			return fmt.Errorf("portal 127.0.0.1:%d not bound (tgtd serves %q): %w", s.port, strings.TrimSpace(out), errRetry)
		}
		return nil
	}
}

// kill ends tgtd process p at once (SIGKILL) and waits for it and its
// output, then removes its control socket.
func (s *Server) kill(p *proc) {
	p.cmd.Process.Kill()
	<-p.exited
	<-p.readDone
	s.removeSockets()
}

func (s *Server) removeSockets() {
	base := filepath.Join(ipcDir, "socket."+strconv.Itoa(s.ctlPort))
	os.Remove(base)
	os.Remove(base + ".lock")
}

func (s *Server) configure(ctx context.Context) error {
	accounts := map[string]bool{}
	for i, t := range s.cfg.Targets {
		tid := strconv.Itoa(i + 1)
		if _, err := s.Tgtadm(ctx, "--mode", "target", "--op", "new", "--tid", tid, "--targetname", t.IQN); err != nil {
			return err
		}
		for j, l := range t.LUNs {
			lun := strconv.Itoa(j + 1)
			if _, err := s.Tgtadm(ctx, "--mode", "logicalunit", "--op", "new", "--tid", tid, "--lun", lun,
				"--backing-store", l.Path, "--blocksize", strconv.Itoa(l.BlockSize)); err != nil {
				return err
			}
			var params []string
			if l.ThinProvisioning {
				params = append(params, "thin_provisioning=1")
			}
			if l.ReadOnly {
				params = append(params, "readonly=1")
			}
			if len(params) > 0 {
				if _, err := s.Tgtadm(ctx, "--mode", "logicalunit", "--op", "update", "--tid", tid, "--lun", lun,
					"--params", strings.Join(params, ",")); err != nil {
					return err
				}
			}
		}
		for _, a := range []struct {
			c        *CHAP
			outgoing bool
		}{{t.CHAP, false}, {t.Mutual, true}} {
			if a.c == nil {
				continue
			}
			if !accounts[a.c.User] {
				if _, err := s.Tgtadm(ctx, "--mode", "account", "--op", "new", "--user", a.c.User, "--password", a.c.Secret); err != nil {
					return err
				}
				accounts[a.c.User] = true
			}
			args := []string{"--mode", "account", "--op", "bind", "--tid", tid, "--user", a.c.User}
			if a.outgoing {
				args = append(args, "--outgoing")
			}
			if _, err := s.Tgtadm(ctx, args...); err != nil {
				return err
			}
		}
		// Last: until the ACL allows them, logins fail, so an initiator
		// reconnecting during a Restart never sees a half-made target (no
		// LUNs, or no CHAP yet).
		if _, err := s.Tgtadm(ctx, "--mode", "target", "--op", "bind", "--tid", tid, "--initiator-address", "ALL"); err != nil {
			return err
		}
	}
	return nil
}

// Tgtadm runs tgtadm against this tgtd (-C N --lld iscsi ARGS...) and
// returns its standard output.
func (s *Server) Tgtadm(ctx context.Context, args ...string) (string, error) {
	return s.run(ctx, true, args...)
}

func (s *Server) run(ctx context.Context, lld bool, args ...string) (string, error) {
	full := []string{"-C", strconv.Itoa(s.ctlPort)}
	if lld {
		full = append(full, "--lld", "iscsi")
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, s.tgtadm, full...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("tgtadm %s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Portal is the iSCSI portal, "127.0.0.1:PORT".
func (s *Server) Portal() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// ControlPort is the N of tgtd -C N and tgtadm -C N.
func (s *Server) ControlPort() int { return s.ctlPort }

// Dir is the directory holding the default backing files.
func (s *Server) Dir() string { return s.dir }

// Targets returns the targets as configured, defaults filled in: IQNs,
// LUN sizes, block sizes and backing-file paths.
func (s *Server) Targets() []Target {
	out := make([]Target, len(s.cfg.Targets))
	for i, t := range s.cfg.Targets {
		t.LUNs = append([]LUN(nil), t.LUNs...)
		out[i] = t
	}
	return out
}

// IQN is the name of the first target.
func (s *Server) IQN() string { return s.cfg.Targets[0].IQN }

// LUNPath returns the backing file of SCSI LUN lun (1 for Target.LUNs[0])
// of target iqn. It panics on an unknown target or LUN: that is a bug in
// the test.
func (s *Server) LUNPath(iqn string, lun int) string {
	for _, t := range s.cfg.Targets {
		if t.IQN != iqn {
			continue
		}
		if lun < 1 || lun > len(t.LUNs) {
			panic(fmt.Sprintf("tgttest: target %s has LUNs 1..%d, not %d (LUN 0 is the controller)", iqn, len(t.LUNs), lun))
		}
		return t.LUNs[lun-1].Path
	}
	panic(fmt.Sprintf("tgttest: no target %s", iqn))
}

// PID is tgtd's process id; Restart changes it.
func (s *Server) PID() int { return s.cur().cmd.Process.Pid }

// Done is closed when tgtd has exited, for whatever reason. After a
// Restart it is the new process's channel; one taken before is closed.
func (s *Server) Done() <-chan struct{} { return s.cur().exited }

// LastLines returns the last lines tgtd printed, oldest first (since the
// last start or Restart).
func (s *Server) LastLines() []string { return s.cur().tr.lastLines() }

// Close deletes the targets (forcibly, closing any sessions), asks tgtd to
// exit, kills it if it has not after 5 s, and removes its sockets and, if
// Launch made it, the directory. It returns an error if tgtd had exited on
// its own before Close: that is a crash worth failing a test for.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.life.Lock()
		defer s.life.Unlock()
		s.mu.Lock()
		p, stopped := s.p, s.stopped
		s.closed = true
		s.mu.Unlock()
		select {
		case <-p.exited:
			if !stopped {
				s.closeErr = fmt.Errorf("tgttest: tgtd exited before Close (%v):\n%s", p.waitErr, strings.Join(p.tr.lastLines(), "\n"))
			}
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			for i := range s.cfg.Targets {
				s.Tgtadm(ctx, "--mode", "target", "--op", "delete", "--force", "--tid", strconv.Itoa(i+1))
			}
			s.run(ctx, false, "--mode", "system", "--op", "delete")
			select {
			case <-p.exited:
			case <-ctx.Done():
			}
			cancel()
		}
		s.kill(p)
		s.removeDir()
	})
	return s.closeErr
}
