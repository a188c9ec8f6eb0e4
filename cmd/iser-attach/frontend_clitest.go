//go:build clitest

package main

// frontend_clitest.go is built only into the binary the CLI tests run
// (go build -tags clitest, in TestMain): a frontend that every host has,
// so that attach gets to its login on a host without ublk and nbd. It
// makes no device.

import (
	"context"
	"errors"

	"github.com/iser-attach/iser-attach/blockdev/counting"
)

func init() {
	frontends["clitest"] = func(context.Context, *attachSpec, *counting.Backend, *lunConn) (blockDevice, error) {
		return nil, errors.New("the clitest frontend makes no device")
	}
}
