package main

import (
	"net"
	"os"
	"syscall"
)

// daemonAttr puts the daemon in its own session, away from the terminal.
func daemonAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// notifyReady tells systemd (Type=notify) that the device exists.
func notifyReady(device string) { sdNotify("READY=1\nSTATUS=attached " + device) }

// sdNotify sends state lines to systemd when it supervises us
// ($NOTIFY_SOCKET); otherwise it does nothing.
func sdNotify(state string) {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return
	}
	if sock[0] == '@' {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		logger.Warn().Err(err).Msg("sd_notify")
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state + "\n"))
}
