package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/iser-attach/iser-attach/ublk"
)

// followWriteCache sets the ublk device's write cache mode to the LUN's
// and keeps it in step: the kernel sends flushes only to a write-back
// queue, and lets /sys/block/ublkbN/queue/write_cache change at runtime.
// Where the kernel keeps write-through (a device created without a
// volatile cache: since Linux 6.11 write_cache cannot add the capability),
// the LUN makes every write durable itself.
func followWriteCache(l *lunConn, d *ublk.Device, volumeName string) {
	queue := filepath.Join("/sys/block", filepath.Base(d.BlockPath()), "queue")
	now, err := setQueueWriteCache(queue, l.WriteCache())
	if err != nil {
		logger.Warn().Err(err).Str("volume", volumeName).Str("device", d.BlockPath()).Bool("kernel_write_back", now).
			Msg("device write cache mode differs from the LUN's")
	}
	l.OnWriteCacheChange(now, func(writeBack bool) bool {
		got, err := setQueueWriteCache(queue, writeBack)
		ev := logger.Warn().Str("volume", volumeName).Str("device", d.BlockPath()).Bool("write_back", writeBack)
		if err != nil {
			ev.Err(err).Bool("kernel_write_back", got).Msg("LUN write cache changed; the device could not follow: writes are made durable by the initiator")
		} else {
			ev.Msg("LUN write cache changed; the device follows")
		}
		return got
	})
}

// queueWriteCache reads a block queue's write_cache attribute.
func queueWriteCache(queue string) (writeBack bool, err error) {
	p := filepath.Join(queue, "write_cache")
	b, err := os.ReadFile(p)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	return strings.TrimSpace(string(b)) == "write back", nil
}

// setQueueWriteCache writes "write back" or "write through" to a block
// queue's write_cache attribute and returns what the kernel reports after.
func setQueueWriteCache(queue string, writeBack bool) (bool, error) {
	mode := "write through"
	if writeBack {
		mode = "write back"
	}
	p := filepath.Join(queue, "write_cache")
	werr := os.WriteFile(p, []byte(mode), 0o644)
	got, err := queueWriteCache(queue)
	switch {
	case err != nil:
		return false, err
	case werr != nil:
		return got, fmt.Errorf("set %s to %q: %w", p, mode, werr)
	case got != writeBack:
		return got, fmt.Errorf("set %s to %q: the kernel keeps the other mode", p, mode)
	}
	return got, nil
}
