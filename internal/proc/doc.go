// Package proc answers questions about other processes from /proc: today
// only whether one is still alive, which the ublk and kernel NBD
// frontends ask before they take over or remove a device a server left.
package proc
