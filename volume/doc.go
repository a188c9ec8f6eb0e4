// Package volume holds what an attached volume needs besides the iSCSI
// session and the block frontend: I/O counters around the block backend,
// the per-volume control socket under /run/iser-attach that carries detach,
// list and status, and the checks detach makes (is the device mounted?).
//
// Goroutines: a ControlServer owns one accept loop and one goroutine per
// client connection; Close stops accepting, closes the listener and removes
// the socket, then waits for them. A Counting backend owns a sampler
// goroutine for the current IOPS, stopped by Close.
package volume
