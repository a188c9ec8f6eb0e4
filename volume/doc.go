// Package volume holds what an attached volume needs besides the iSCSI
// session, the block frontend and the I/O counters around its backend
// (blockdev/counting; Counters is its record of a volume's I/O): the
// per-volume control socket under /run/iser-attach that
// carries detach, list, status and stats (the counters and histogram for
// `iser-attach stats`), and the checks detach makes (is the device
// mounted?).
//
// Configured volumes have one file each, NAME.conf in ConfigDir
// (/etc/iser-attach/volumes, or $ISER_ATTACH_CONFIG_DIR): key = value lines
// naming the portals, target, LUN, transport, frontend, CHAP user names and
// secret files (never the secrets), queue depth, timeouts and queues.
// ParseConfig reports every problem as a *ConfigError naming the file and
// line; WriteConfig replaces a file atomically. An attached volume gets
// stable names in LinkDir (/dev/iser): NAME and by-wwn/WWN, symbolic links
// to its /dev/ublkbN or /dev/nbdN that CreateLinks replaces atomically and
// RemoveLinks removes only while they still point at that device.
//
// Goroutines: a ControlServer owns one accept loop and one goroutine per
// client connection; Close stops accepting, closes the listener and removes
// the socket, then waits for them.
package volume
