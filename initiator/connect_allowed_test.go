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
