package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tgtlab:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		luns       = flag.Int("luns", 1, "number of backing-store LUNs (SCSI LUNs 1..N; LUN 0 is tgt's controller)")
		size       = flag.String("size", "64M", "size of each LUN: bytes or with a K, M, G or T suffix (powers of 1024)")
		blockSize  = flag.Int("block-size", 512, "logical block size, 512 or 4096")
		thin       = flag.Bool("thin", false, "thin provisioning (UNMAP punches holes in the backing file)")
		readOnly   = flag.Bool("readonly", false, "write-protect the LUNs")
		iqn        = flag.String("iqn", "iqn.2024-01.io.iser-attach.test:lab", "target name")
		chapUser   = flag.String("chap-user", "", "CHAP user the initiator must log in as")
		chapSecret = flag.String("chap-secret", "", "its secret")
		mutUser    = flag.String("mutual-user", "", "CHAP user the target answers mutual CHAP with")
		mutSecret  = flag.String("mutual-secret", "", "its secret")
		dir        = flag.String("dir", "", "directory for the backing files (created if missing, kept); default: a temporary one, removed on exit")
		trace      = flag.Bool("trace", false, "run tgtd with -d 1 and copy its log to stderr")
	)
	flag.Parse()
	if flag.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	n, err := parseSize(*size)
	if err != nil {
		return err
	}
	if *luns < 1 {
		return errors.New("-luns must be at least 1")
	}
	t := tgttest.Target{IQN: *iqn}
	for i := 0; i < *luns; i++ {
		t.LUNs = append(t.LUNs, tgttest.LUN{Size: n, BlockSize: *blockSize, ThinProvisioning: *thin, ReadOnly: *readOnly})
	}
	if *chapUser != "" || *chapSecret != "" {
		t.CHAP = &tgttest.CHAP{User: *chapUser, Secret: *chapSecret}
	}
	if *mutUser != "" || *mutSecret != "" {
		t.Mutual = &tgttest.CHAP{User: *mutUser, Secret: *mutSecret}
	}
	if *dir != "" {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return fmt.Errorf("create -dir: %w", err)
		}
	}
	cfg := tgttest.Config{Targets: []tgttest.Target{t}, Dir: *dir, Trace: *trace}
	if *trace {
		cfg.Log = os.Stderr
	}

	// Signals are caught from the start so that a ^C during start-up
	// still tears tgtd down.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := tgttest.Launch(ctx, cfg)
	if err != nil {
		return err
	}
	// Stop the start-up watcher; from here the main goroutine owns sigs.
	cancel()

	var b strings.Builder
	fmt.Fprintf(&b, "PORTAL=%s\nTARGET=%s\nCONTROL_PORT=%d\nTGTD_PID=%d\n", s.Portal(), s.IQN(), s.ControlPort(), s.PID())
	for i := range t.LUNs {
		fmt.Fprintf(&b, "LUN%d=%s\n", i+1, s.LUNPath(s.IQN(), i+1))
	}
	b.WriteString("READY=1\n")
	if _, err := os.Stdout.WriteString(b.String()); err != nil {
		s.Close()
		return fmt.Errorf("write ready lines: %w", err)
	}

	select {
	case sig := <-sigs:
		fmt.Fprintf(os.Stderr, "tgtlab: %v: stopping tgtd\n", sig)
		return s.Close()
	case <-s.Done():
		err := s.Close()
		return fmt.Errorf("tgtd died: %w", err)
	}
}

// parseSize reads "4096", "64M", "1G", "3T".
func parseSize(s string) (int64, error) {
	mult := int64(1)
	if s != "" {
		switch strings.ToUpper(s[len(s)-1:]) {
		case "K":
			mult = 1 << 10
		case "M":
			mult = 1 << 20
		case "G":
			mult = 1 << 30
		case "T":
			mult = 1 << 40
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
