//go:build !cgo

package rdma

import (
	"context"
	"errors"
	"testing"
)

// Every entry point of a CGO_ENABLED=0 build must say why it cannot work.
func TestNotSupportedWithoutCgo(t *testing.T) {
	var c *Conn
	var l *Listener
	var r *ConnRequest
	_, errDial := Dial(context.Background(), "10.99.0.1:3260", DialOptions{})
	_, errListen := Listen(":3260", DialOptions{})
	_, errAccept := l.Accept(context.Background())
	_, errReq := l.AcceptRequest(context.Background())
	_, errReqAccept := r.Accept(context.Background(), nil)
	_, errMR := c.RegisterMemory(4096)
	_, errPoll := c.Poll(context.Background(), make([]Completion, 1))
	for name, err := range map[string]error{
		"Supported":      Supported(),
		"Dial":           errDial,
		"Listen":         errListen,
		"Accept":         errAccept,
		"AcceptRequest":  errReq,
		"Request.Accept": errReqAccept,
		"Reject":         r.Reject(nil),
		"Register":       errMR,
		"PostSend":       c.PostSend([]SendWR{{ID: 1}}),
		"PostRecv":       c.PostRecv([]RecvWR{{ID: 1}}),
		"Poll":           errPoll,
		"Disconnect":     c.Disconnect(),
	} {
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: got %v, want ErrNotSupported", name, err)
		} else if err.Error() == ErrNotSupported.Error() {
			t.Errorf("%s: error %q does not name the operation", name, err)
		}
	}
	if got := ErrNotSupported.Error(); got != "built without RDMA support (CGO_ENABLED=0)" {
		t.Errorf("ErrNotSupported = %q", got)
	}
}
