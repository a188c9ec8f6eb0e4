package initiator

import (
	"context"
	"testing"
	"time"
)

// TestAllowedRoundsTheTimeout: the login timeout a timeout error names is the
// one configured, though the deadline was set before the start was read (a
// loaded machine saw "within 499ms" for a 500ms timeout).
func TestAllowedRoundsTheTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, late time.Duration
		want          string
	}{
		{500 * time.Millisecond, 700 * time.Microsecond, "500ms"},
		{500 * time.Millisecond, 3 * time.Millisecond, "500ms"},
		{15 * time.Second, 30 * time.Millisecond, "15s"},
		{2 * time.Second, 0, "2s"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
		dl, _ := ctx.Deadline()
		start := dl.Add(-tc.timeout).Add(tc.late)
		if got := allowed(ctx, start).String(); got != tc.want {
			t.Errorf("timeout %v read %v late: %s, want %s", tc.timeout, tc.late, got, tc.want)
		}
		cancel()
	}
}

// TestAllowedNamesALoginContextsTimeout: under a LoginContext the error
// names the timeout given, however late the login started (a race run on
// a loaded machine read "within 490ms" for 500ms through the rounding).
func TestAllowedNamesALoginContextsTimeout(t *testing.T) {
	for _, late := range []time.Duration{0, 15 * time.Millisecond, 120 * time.Millisecond} {
		ctx, cancel := LoginContext(context.Background(), 500*time.Millisecond)
		dl, _ := ctx.Deadline()
		start := dl.Add(-500 * time.Millisecond).Add(late)
		if got := allowed(ctx, start); got != 500*time.Millisecond {
			t.Errorf("a 500ms LoginContext read %v late: %v", late, got)
		}
		cancel()
	}
}

// TestAllowedUnderAnotherDeadline: a LoginContext's timeout is named only
// while its deadline bounds the context: under a parent's sooner deadline,
// or a child's, the time left is named (rounded).
func TestAllowedUnderAnotherDeadline(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ctx, cancel2 := LoginContext(parent, 15*time.Second)
	defer cancel2()
	dl, _ := ctx.Deadline()
	if got := allowed(ctx, dl.Add(-200*time.Millisecond)); got != 200*time.Millisecond {
		t.Errorf("under a parent's 200ms, a 15s LoginContext read %v", got)
	}
	outer, cancel3 := LoginContext(context.Background(), 30*time.Second)
	defer cancel3()
	inner, cancel4 := context.WithTimeout(outer, 2*time.Second)
	defer cancel4()
	dl, _ = inner.Deadline()
	if got := allowed(inner, dl.Add(-2*time.Second)); got != 2*time.Second {
		t.Errorf("a 2s child of a 30s LoginContext read %v", got)
	}
}
