package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator/iscsitest"
	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/internal/tgttest"
	"github.com/iser-attach/iser-attach/volume"
)

// notifySocket is a NOTIFY_SOCKET, as systemd gives a Type=notify unit:
// attach retries its login only under systemd. It records the STATUS=
// lines sent to it.
type notifySocket struct {
	path   string
	mu     sync.Mutex
	status []string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "notify") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: filepath.Join(dir, "s")}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			for _, line := range strings.Split(string(buf[:k]), "\n") {
				if s, ok := strings.CutPrefix(line, "STATUS="); ok {
					n.mu.Lock()
					n.status = append(n.status, s)
					n.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done; os.RemoveAll(dir) })
	return n
}

// retries counts the "login failed (attempt N)" statuses: the failed
// logins after which attach waits to try again.
func (n *notifySocket) retries() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, s := range n.status {
		if strings.HasPrefix(s, "login failed (attempt ") {
			k++
		}
	}
	return k
}

// attachRun is an attach run to its end: exit status, stderr, time taken,
// and the failed logins after which it waited to try again.
type attachRun struct {
	code    int
	stderr  string
	took    time.Duration
	retries int
}

// runAttach runs attach ARGS with a test volume name (its lock and log
// files removed afterwards) and the clitest frontend. Under systemd
// (systemd true: a NOTIFY_SOCKET) the run is ended by SIGTERM, what
// systemd sends when TimeoutStartSec runs out, once minRetries logins
// failed and were to be retried, or after limit, whichever comes first.
func runAttach(t *testing.T, systemd bool, minRetries int, limit time.Duration, args ...string) attachRun {
	t.Helper()
	name := "refused-test-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		for _, ext := range []string{".lock", ".log", ".sock"} {
			os.Remove(filepath.Join(volume.RunDir, name+ext))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), limit+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"--initiator-name", initiatorIQN, "attach",
		"--transport", "tcp", "--frontend", "clitest", "--name", name, "--login-timeout", "2s"}, args...)...)
	cmd.Env = os.Environ()
	var ns *notifySocket
	if systemd {
		ns = newNotifySocket(t)
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+ns.path)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	deadline := time.After(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-exited:
			break wait
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err = <-exited
			break wait
		case <-tick.C:
			if ns != nil && minRetries > 0 && ns.retries() >= minRetries {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				err = <-exited
				break wait
			}
		}
	}
	r := attachRun{stderr: errb.String(), took: time.Since(start)}
	if ns != nil {
		r.retries = ns.retries()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("attach: %v", err)
	}
	return r
}

// TestCLIAttachLoginRefusal: a login the target refused for good (a
// wrong CHAP secret, a target that does not exist, an unsupported
// version) ends attach at once with exit status 3, under systemd too,
// where other login failures are retried, and through --daemon's parent;
// so does info's. A portal that refuses connections, or a target that
// answers "service unavailable", is still retried, and the run ended by
// a signal exits 1. tgtd answers the first two; the scripted target the
// statuses tgtd does not send.
func TestCLIAttachLoginRefusal(t *testing.T) {
	const iqn = "iqn.2026-11.test:refusal"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn, CHAP: &tgttest.CHAP{User: "u1", Secret: "goodsecret123"}})
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("wrongsecret12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "good")
	if err := os.WriteFile(good, []byte("goodsecret123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refusing := func(class, detail uint8) (string, *atomic.Int32) {
		return iscsitest.Listen(t, func(tg *iscsitest.Target, req *pdu.PDU) []iscsitest.Reply {
			return tg.Login(req, iscsitest.LoginOptions{StatusClass: class, StatusDetail: detail})
		})
	}
	wrongSecret := []string{"--portal", srv.Portal(), "--target", iqn, "--lun", "1", "--chap-user", "u1", "--chap-secret-file", wrong}

	// Refused: exit 3 well within the first retry's backoff (1 s), no
	// retry announced.
	for _, c := range []struct {
		name    string
		systemd bool
		args    []string
		want    string
	}{
		{"wrong CHAP secret", true, wrongSecret, "authentication failed (status class 0x02 detail 0x01)"},
		{"wrong CHAP secret, not under systemd", false, wrongSecret, "authentication failed"},
		{"wrong CHAP secret, --daemon", false, append([]string{"--daemon"}, wrongSecret...), "daemon failed: "},
		{"no such target", true, []string{"--portal", srv.Portal(), "--target", iqn + "-nosuch", "--lun", "1",
			"--chap-user", "u1", "--chap-secret-file", good}, "target not found (status class 0x02 detail 0x03)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runAttach(t, c.systemd, 1, 20*time.Second, c.args...)
			if r.code != exitRefused || r.took > 5*time.Second || r.retries != 0 {
				t.Fatalf("exit status %d after %v and %d retries, want 3 at once:\n%s", r.code, r.took, r.retries, r.stderr)
			}
			if !strings.Contains(lastLine(r.stderr), c.want) {
				t.Errorf("last line %q, want %q", lastLine(r.stderr), c.want)
			}
		})
	}
	t.Run("unsupported version", func(t *testing.T) {
		addr, conns := refusing(2, 5)
		r := runAttach(t, true, 1, 20*time.Second, "--portal", addr, "--target", iqn, "--lun", "1")
		if r.code != exitRefused || r.took > 5*time.Second || conns.Load() != 1 {
			t.Fatalf("exit status %d after %v and %d logins, want 3 after one:\n%s", r.code, r.took, conns.Load(), r.stderr)
		}
	})
	t.Run("info", func(t *testing.T) {
		_, errs, err := run(t, nil, append([]string{"info", "--transport", "tcp"}, wrongSecret...)...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitRefused {
			t.Fatalf("info: %v, want exit status 3:\n%s", err, errs)
		}
	})

	// Transient: retried until the signal, exit 1.
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		r := runAttach(t, true, 2, 20*time.Second, "--portal", closed, "--target", iqn, "--lun", "1")
		if r.code != 1 || r.retries < 2 {
			t.Fatalf("exit status %d after %d retries, want 1 after 2 or more:\n%s", r.code, r.retries, r.stderr)
		}
	})
	t.Run("service unavailable", func(t *testing.T) {
		addr, conns := refusing(3, 1)
		r := runAttach(t, true, 2, 20*time.Second, "--portal", addr, "--target", iqn, "--lun", "1")
		if r.code != 1 || r.retries < 2 || conns.Load() < 2 {
			t.Fatalf("exit status %d after %d retries (%d connections), want 1 after 2 or more:\n%s",
				r.code, r.retries, conns.Load(), r.stderr)
		}
	})
}
