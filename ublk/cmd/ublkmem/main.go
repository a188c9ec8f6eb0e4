// Command ublkmem serves a ublk device backed by a file (on tmpfs: memory
// that outlives the process), for the VM lab's recovery test: kill -9 the
// server, start another with -recover N, and the device and the filesystem
// on it carry on.
//
//	ublkmem -backing /dev/shm/disk.img -size 128M [-id-file F]   # new device
//	ublkmem -backing /dev/shm/disk.img -recover N [-id-file F]   # reattach
//
// With -async the queue loop serves reads and writes itself (the bench's
// ublk floor); otherwise a goroutine per request does.
//
// SIGTERM or SIGINT stops and deletes the device; SIGUSR1 detaches (leaves
// it for a later -recover). The device number is printed and written to
// -id-file once the device serves I/O.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iser-attach/iser-attach/ublk"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ublkmem:", err)
		os.Exit(1)
	}
}

func run() error {
	backing := flag.String("backing", "", "backing file (created at -size when missing)")
	sizeArg := flag.String("size", "128M", "size of a new backing file (K, M, G suffixes)")
	recoverID := flag.Int("recover", -1, "reattach to this device instead of creating one")
	idFile := flag.String("id-file", "", "write the device number here once serving")
	queues := flag.Int("queues", 1, "hardware queues")
	depth := flag.Int("depth", 64, "queue depth")
	writeCache := flag.Bool("write-cache", true, "announce a volatile write cache (FLUSH reaches fsync of the file)")
	async := flag.Bool("async", false, "serve reads and writes on the queue loop (blockdev.Async)")
	noBatch := flag.Bool("no-batch", false, "one FETCH/COMMIT per request even where the kernel offers UBLK_F_BATCH_IO")
	noDefer := flag.Bool("no-defer", false, "queue rings without IORING_SETUP_DEFER_TASKRUN")
	sched := flag.String("scheduler", ublk.SchedulerNone, "a new device's I/O scheduler, as iser-attach sets it (keep: the kernel's)")
	flag.Parse()
	if *backing == "" {
		return fmt.Errorf("-backing is required")
	}
	size, err := parseSize(*sizeArg)
	if err != nil {
		return err
	}
	disk, err := openFileDisk(*backing, size)
	if err != nil {
		return err
	}
	defer disk.Close()

	var b ublk.Backend = disk
	if *async {
		b = asyncDisk{disk}
	}
	opt := ublk.DeviceOptions{Queues: *queues, QueueDepth: *depth, WriteCache: *writeCache, FUA: *writeCache, NoBatch: *noBatch, NoDeferTaskrun: *noDefer}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var d *ublk.Device
	if *recoverID >= 0 {
		d, err = ublk.Recover(ctx, *recoverID, b, opt)
	} else {
		d, err = ublk.Create(ctx, b, opt)
	}
	cancel()
	if err != nil {
		return err
	}
	if *recoverID < 0 && *sched != "keep" {
		if _, err := d.SetScheduler(*sched); err != nil {
			fmt.Fprintln(os.Stderr, "ublkmem:", err)
		}
	}
	fmt.Printf("ublkmem: serving %s (id %d, pid %d)\n", d.BlockPath(), d.ID(), os.Getpid())
	if *idFile != "" {
		if err := os.WriteFile(*idFile+".tmp", []byte(strconv.Itoa(d.ID())+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(*idFile+".tmp", *idFile); err != nil {
			return err
		}
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	select {
	case s := <-sig:
		if s == syscall.SIGUSR1 {
			fmt.Println("ublkmem: detaching")
			return d.Detach()
		}
		fmt.Println("ublkmem: stopping")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = d.Stop(ctx)
	case <-d.Done():
		err = d.Err()
		if err == nil {
			err = fmt.Errorf("device %d removed under us", d.ID())
		}
		d.Detach()
	}
	st := d.Stats()
	fmt.Printf("ublkmem: %+v\n", st)
	return err
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
