// Package testnet holds network helpers shared by tests in several
// packages.
package testnet

import (
	"net"
	"sync"
	"testing"
)

// SilentListener starts a TCP listener on 127.0.0.1 that accepts
// connections and never writes to them: a portal that hangs a login. It
// returns the listener's address; the listener and every accepted
// connection are closed when the test ends.
func SilentListener(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
