package main

import (
	"context"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// signalContext ends on SIGINT or SIGTERM.
func signalContext(c *cli.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
}

// timeoutContext ends on a signal or after d.
func timeoutContext(c *cli.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signalContext(c)
	ctx2, cancel := context.WithTimeout(ctx, d)
	return ctx2, func() { cancel(); stop() }
}
