package nbd

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
)

// Listen opens the listener named by spec:
//
//	unix:PATH        a Unix stream socket; a stale socket file left by a dead
//	                 server is removed, a live one is an error
//	tcp:HOST:PORT    a TCP socket (HOST may be empty, an IPv6 address goes
//	                 in brackets)
func Listen(spec string) (net.Listener, error) {
	kind, addr, ok := strings.Cut(spec, ":")
	if !ok || addr == "" {
		return nil, fmt.Errorf("nbd listen %q: want unix:PATH or tcp:HOST:PORT", spec)
	}
	switch kind {
	case "unix":
		if err := removeStaleSocket(addr); err != nil {
			return nil, fmt.Errorf("nbd listen %q: %w", spec, err)
		}
		l, err := net.Listen("unix", addr)
		if err != nil {
			return nil, fmt.Errorf("nbd listen %q: %w", spec, err)
		}
		return l, nil
	case "tcp":
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("nbd listen %q: %w", spec, err)
		}
		return l, nil
	}
	return nil, fmt.Errorf("nbd listen %q: unknown network %q, want unix or tcp", spec, kind)
}

// Loopback reports whether the listener spec (as for Listen) only accepts
// connections from this host: any unix: socket, and a tcp: address whose
// host is a loopback IP address or "localhost". An empty host, 0.0.0.0,
// :: and every other name or address are reachable from other hosts. A
// malformed spec is an error.
func Loopback(spec string) (bool, error) {
	kind, addr, ok := strings.Cut(spec, ":")
	if !ok || addr == "" {
		return false, fmt.Errorf("nbd listen %q: want unix:PATH or tcp:HOST:PORT", spec)
	}
	switch kind {
	case "unix":
		return true, nil
	case "tcp":
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return false, fmt.Errorf("nbd listen %q: %w", spec, err)
		}
		if strings.EqualFold(host, "localhost") {
			return true, nil
		}
		ip, err := netip.ParseAddr(host)
		return err == nil && ip.Unmap().IsLoopback(), nil
	}
	return false, fmt.Errorf("nbd listen %q: unknown network %q, want unix or tcp", spec, kind)
}

// removeStaleSocket deletes path if it is a socket nobody listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat socket: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: another server is listening", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("probe socket: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}
