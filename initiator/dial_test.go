package initiator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/internal/testnet"
	"github.com/iser-attach/iser-attach/rdma"
)

// TestDialAutoLogsChoiceOnce: auto mode's transport choice is an info
// line the first time a portal is dialled and a debug line when the same
// choice is made again (as on every recovery).
func TestDialAutoLogsChoiceOnce(t *testing.T) {
	addr := testnet.SilentListener(t)
	var buf bytes.Buffer
	log := zerolog.New(&buf).Level(zerolog.DebugLevel)
	for range 3 {
		dm, err := initiator.DialDatamover(context.Background(), initiator.DialConfig{Transport: initiator.TransportAuto, Addr: addr, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		dm.Close()
	}
	levels := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]string
		_ = json.Unmarshal([]byte(line), &m)
		if m["message"] == "transport chosen" {
			levels[m["level"]]++
			if m["transport"] != "tcp" || m["reason"] == "" || strings.Contains(m["reason"], ":") {
				t.Errorf("transport line %s: want tcp and a short reason", line)
			}
		}
	}
	if levels["info"] != 1 || levels["debug"] != 2 {
		t.Errorf("transport lines by level %v, want one info and two debug:\n%s", levels, buf.String())
	}
}

// TestDialISERHintsWithoutDevice: --transport iser on a host without an
// RDMA device fails with ErrISERUnavailable and names the commands that
// list and set up one.
func TestDialISERHintsWithoutDevice(t *testing.T) {
	if links, err := rdma.Links(); err == nil && len(links) > 0 {
		t.Skip("this host has an RDMA device")
	}
	_, err := initiator.DialDatamover(context.Background(), initiator.DialConfig{Transport: initiator.TransportISER, Addr: "127.0.0.1:3260"})
	if !errors.Is(err, initiator.ErrISERUnavailable) {
		t.Fatalf("error %v, want ErrISERUnavailable", err)
	}
	for _, want := range []string{"no RDMA device", "iser-attach rdma list", "iser-attach rdma setup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestConnectNoLoginResponse: a portal that accepts the connection and
// never answers is "no login response from P within T", still matching
// context.DeadlineExceeded.
func TestConnectNoLoginResponse(t *testing.T) {
	addr := testnet.SilentListener(t)
	ctx, cancel := initiator.LoginContext(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := initiator.Connect(ctx, initiator.DialConfig{Transport: initiator.TransportTCP, Addr: addr},
		initiator.SessionConfig{LoginConfig: initiator.LoginConfig{InitiatorName: "iqn.2026-11.test:i", TargetName: "iqn.2026-11.test:t"}})
	var te *initiator.LoginTimeoutError
	if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want a LoginTimeoutError", err)
	}
	if want := "no login response from " + addr + " within 300ms"; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "deadline") {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestConnectTimeoutBoundsTheConnectionAlone: DialConfig.ConnectTimeout
// bounds the connection, not the login exchange on it, which keeps the
// caller's deadline (LIO holds a login given up early for its own login
// timer and takes no other on that portal meanwhile).
func TestConnectTimeoutBoundsTheConnectionAlone(t *testing.T) {
	addr := testnet.SilentListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := initiator.Connect(ctx, initiator.DialConfig{Transport: initiator.TransportTCP, Addr: addr, ConnectTimeout: 50 * time.Millisecond},
		initiator.SessionConfig{LoginConfig: initiator.LoginConfig{InitiatorName: "iqn.2026-11.test:i", TargetName: "iqn.2026-11.test:t"}})
	took := time.Since(start)
	var te *initiator.LoginTimeoutError
	if !errors.As(err, &te) || te.Connecting {
		t.Fatalf("error %v, want a LoginTimeoutError after the connection", err)
	}
	if took < 500*time.Millisecond {
		t.Fatalf("the login gave up after %v: the 50ms connect timeout cut it short (want the caller's 600ms)", took)
	}
}
