package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/volume"
)

// volumeCommand manages the volume configuration files in
// volume.ConfigDirPath(): one NAME.conf per volume.
func volumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "volume",
		Usage: "manage volume configuration files (" + volume.ConfigDir + "/NAME.conf, or $" + volume.ConfigDirEnv + ")",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "write a volume configuration file; prints its path",
				ArgsUsage: "NAME",
				Flags:     volumeAddFlags(),
				Action:    volumeAdd,
			},
			{
				Name:      "remove",
				Usage:     "delete a volume configuration file; refused while the volume is attached unless --force",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "remove the file even while the volume is attached"}},
				Action:    volumeRemove,
			},
			{
				Name:   "list",
				Usage:  "list configured volumes and whether they are attached",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action: volumeList,
			},
			{
				Name:      "check",
				Usage:     "check volume configuration files (all of them without NAME) and their secret files",
				ArgsUsage: "[NAME...]",
				Action:    volumeCheck,
			},
		},
	}
}

func volumeAddFlags() []cli.Flag {
	d := volume.DefaultConfig("")
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "portal", Usage: "target portal: host, host:port, [v6]:port, each optionally ,TPGT as iscsiadm prints it (checked at login); repeat for more portals: a path each (multipath), one portal = line each"},
		&cli.StringFlag{Name: "target", Usage: "target IQN (or eui./naa. name)"},
		&cli.UintFlag{Name: "lun", Usage: "logical unit number, 0 to 16383", DefaultText: "none in the file: attach picks the target's lowest-numbered disk"},
		&cli.StringFlag{Name: "transport", Value: d.Transport, Usage: "auto, iser or tcp"},
		&cli.StringFlag{Name: "frontend", Value: d.Frontend, Usage: "ublk or nbd"},
		&cli.StringFlag{Name: "chap-user", Usage: "CHAP user name (one-way CHAP)"},
		&cli.StringFlag{Name: "chap-secret-file", Usage: "absolute path of the file holding the CHAP secret"},
		&cli.StringFlag{Name: "mutual-user", Usage: "user name the target must answer with (mutual CHAP)"},
		&cli.StringFlag{Name: "mutual-secret-file", Usage: "absolute path of the file holding the target's secret"},
		&cli.IntFlag{Name: "queue-depth", Value: d.QueueDepth, Usage: "SCSI commands in flight, 1 to 1024"},
		&cli.DurationFlag{Name: "replacement-timeout", Value: d.ReplacementTimeout, Usage: "how long I/O waits for a lost session to come back (0: fail at once)"},
		&cli.DurationFlag{Name: "nop-interval", Value: d.NOPInterval, Usage: "NOP-Out ping interval when idle (0: off)"},
		&cli.DurationFlag{Name: "nop-timeout", Value: d.NOPTimeout, Usage: "time a NOP-Out ping may take"},
		noPathTimeoutFlag(),
		&cli.BoolFlag{Name: "all-portals", Usage: "attach also logs in through every other portal SendTargets lists for the target, a path each (all_portals = true)"},
		pathSelectorFlag(),
		&cli.DurationFlag{Name: "login-timeout", Value: d.LoginTimeout, Usage: "time allowed for connecting and logging in"},
		&cli.DurationFlag{Name: "command-timeout", Value: d.CommandTimeout, Usage: "time a SCSI command may go without status before it is aborted"},
		&cli.IntFlag{Name: "queues", Value: d.Queues, Usage: "ublk: hardware queues (they share one connection; one queue is the fastest)"},
		ioSchedulerFlag(d.IOScheduler),
		&cli.IntFlag{Name: "nbd-connections", Value: d.NBDConnections, Usage: "nbd: sockets per device"},
		&cli.StringFlag{Name: "initiator-name", Usage: "initiator IQN for this volume (default: the host's)"},
		metricsListenFlag(),
		&cli.BoolFlag{Name: "read-only", Usage: "attach the volume read-only (read_only = true)"},
		&cli.BoolFlag{Name: "force", Usage: "overwrite an existing file"},
	}
}

func volumeAdd(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("volume add: expected one NAME, got %d arguments", c.NArg())
	}
	name := c.Args().First()
	if err := volume.ValidName(name); err != nil {
		return usageErrorf(c, "%v", err)
	}
	if c.Uint("lun") > 16383 {
		return usageErrorf(c, "--lun %d: at most 16383", c.Uint("lun"))
	}
	cfg := volume.DefaultConfig(name)
	cfg.Portals = c.StringSlice("portal")
	cfg.Target = c.String("target")
	cfg.LUN, cfg.AnyLUN = uint16(c.Uint("lun")), !c.IsSet("lun")
	cfg.Transport, cfg.Frontend = c.String("transport"), c.String("frontend")
	cfg.CHAPUser, cfg.CHAPSecretFile = c.String("chap-user"), c.String("chap-secret-file")
	cfg.MutualUser, cfg.MutualSecretFile = c.String("mutual-user"), c.String("mutual-secret-file")
	cfg.QueueDepth = c.Int("queue-depth")
	cfg.ReplacementTimeout, cfg.NOPInterval = c.Duration("replacement-timeout"), c.Duration("nop-interval")
	cfg.NOPTimeout, cfg.LoginTimeout = c.Duration("nop-timeout"), c.Duration("login-timeout")
	cfg.CommandTimeout = c.Duration("command-timeout")
	if cfg.NoPathTimeout = noPathTimeout(c); cfg.NoPathTimeout < -1 {
		return usageErrorf(c, "--no-path-timeout %v: must not be negative", cfg.NoPathTimeout)
	}
	cfg.AllPortals, cfg.PathSelector = c.Bool("all-portals"), c.String("path-selector")
	cfg.Queues, cfg.NBDConnections = c.Int("queues"), c.Int("nbd-connections")
	cfg.IOScheduler = c.String("io-scheduler")
	cfg.InitiatorName = c.String("initiator-name")
	cfg.MetricsListen = c.String("metrics-listen")
	cfg.ReadOnly = c.Bool("read-only")
	if err := checkVolumeFlags(&cfg); err != nil {
		return usageErrorf(c, "%v", err)
	}
	// What volume check would find wrong with the secret files.
	if errs := checkSecretFiles(&cfg); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, ce := range errs {
			msgs[i] = flagOfKey(ce.Key) + ": " + flagsInReason(ce.Reason)
		}
		return fmt.Errorf("volume add %s: %s", name, strings.Join(msgs, "; "))
	}
	if err := volume.WriteConfig(&cfg, c.Bool("force")); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("volume add %s: %w (use --force to overwrite)", name, err)
		}
		return fmt.Errorf("volume add %s: %w", name, err)
	}
	fmt.Fprintln(c.App.Writer, cfg.Path)
	return nil
}

// checkVolumeFlags validates cfg the way its file will be read (Marshal,
// then ParseConfig) and names the flag at fault.
func checkVolumeFlags(cfg *volume.Config) error {
	got, err := volume.ParseConfig(cfg.Name, "", bytes.NewReader(cfg.Marshal()))
	var ce *volume.ConfigError
	if errors.As(err, &ce) && ce.Key != "" {
		return fmt.Errorf("%s: %s", flagOfKey(ce.Key), flagsInReason(ce.Reason))
	}
	if err != nil {
		return err
	}
	got.Path = cfg.Path
	if !reflect.DeepEqual(got, cfg) {
		return errors.New("a value does not survive the configuration file format (leading or trailing spaces?)")
	}
	return nil
}

// flagsInReason names volume add's flags where a configuration error's
// reason names keys ("needs chap_user" becomes "needs --chap-user").
func flagsInReason(reason string) string {
	words := strings.Fields(reason)
	for i, w := range words {
		core := strings.TrimRight(w, ",;:.)")
		for _, k := range volume.ConfigKeys() {
			if core == k && strings.Contains(k, "_") {
				words[i] = flagOfKey(k) + w[len(core):]
			}
		}
	}
	return strings.Join(words, " ")
}

// flagOfKey is volume add's flag for a configuration key.
func flagOfKey(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }

func volumeRemove(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("volume remove: expected one NAME, got %d arguments", c.NArg())
	}
	name := c.Args().First()
	if err := volume.ValidName(name); err != nil {
		return usageErrorf(c, "%v", err)
	}
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	if _, st, err := volume.Find(ctx, name); err == nil {
		if !c.Bool("force") {
			return fmt.Errorf("volume remove %s: attached as %s (pid %d); detach it first or use --force", name, st.Device, st.PID)
		}
		fmt.Fprintf(c.App.ErrWriter, "volume %s stays attached as %s; only its configuration file goes\n", name, st.Device)
	}
	if err := volume.RemoveConfig(name); err != nil {
		return fmt.Errorf("volume remove: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "removed %s\n", volume.ConfigPath(name))
	return nil
}

// volumeRow is one line of `volume list`.
type volumeRow struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	Target    string   `json:"target,omitempty"`
	LUN       *uint16  `json:"lun,omitempty"`
	Portals   []string `json:"portals,omitempty"`
	Transport string   `json:"transport,omitempty"`
	Frontend  string   `json:"frontend,omitempty"`
	State     string   `json:"state"` // attached, detached or invalid
	Device    string   `json:"device,omitempty"`
	Error     string   `json:"error,omitempty"`
}

func volumeList(c *cli.Context) error {
	if c.NArg() != 0 {
		return fmt.Errorf("volume list: no arguments expected, got %q", c.Args().Slice())
	}
	cfgs, listErr := volume.ListConfigs()
	bad, err := configErrors(listErr)
	if err != nil {
		return fmt.Errorf("volume list: %w", err)
	}
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	attached := map[string]volume.Status{}
	if all, err := volume.List(ctx); err == nil {
		for _, st := range all {
			attached[st.Name] = st
		}
	}
	rows := make([]volumeRow, 0, len(cfgs)+len(bad))
	for _, cfg := range cfgs {
		var lun *uint16
		if !cfg.AnyLUN {
			lun = &cfg.LUN
		}
		rows = append(rows, volumeRow{Name: cfg.Name, Path: cfg.Path, Target: cfg.Target, LUN: lun, Portals: cfg.Portals,
			Transport: cfg.Transport, Frontend: cfg.Frontend, State: "detached"})
	}
	for _, fe := range bad {
		rows = append(rows, volumeRow{Name: strings.TrimSuffix(filepath.Base(fe.path), ".conf"), Path: fe.path,
			State: "invalid", Error: finalMessage(fe.err)})
	}
	for i := range rows {
		if st, ok := attached[rows[i].Name]; ok {
			rows[i].Device = st.Device
			if rows[i].State == "detached" {
				rows[i].State = "attached"
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else if err := printVolumeTable(c.App.Writer, rows); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("volume list: %d invalid configuration file(s) in %s", len(bad), volume.ConfigDirPath())
	}
	return nil
}

func printVolumeTable(w io.Writer, rows []volumeRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTARGET\tLUN\tPORTALS\tTRANSPORT\tFRONTEND\tSTATE")
	for _, r := range rows {
		state := "-"
		switch {
		case r.State == "invalid":
			state = "invalid: " + r.Error
		case r.Device != "":
			state = "attached " + r.Device
		}
		if r.State == "invalid" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%s\n", r.Name, state)
			continue
		}
		lun := "first disk"
		if r.LUN != nil {
			lun = fmt.Sprint(*r.LUN)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Target, lun,
			strings.Join(r.Portals, " "), r.Transport, r.Frontend, state)
	}
	return tw.Flush()
}

// fileError is a configuration file that did not parse: a
// volume.ConfigErrors, or a *volume.ConfigError when it could not be read.
type fileError struct {
	path string
	err  error
}

// multiError is an error joining others (errors.Join).
type multiError interface{ Unwrap() []error }

// configErrors splits ListConfigs' error into the files that did not
// parse; any other error is returned as such.
func configErrors(err error) ([]fileError, error) {
	if err == nil {
		return nil, nil
	}
	errs := []error{err}
	if j, ok := err.(multiError); ok {
		errs = j.Unwrap()
	}
	var out []fileError
	for _, e := range errs {
		var ce *volume.ConfigError
		if !errors.As(e, &ce) {
			return nil, err
		}
		out = append(out, fileError{ce.Path, e})
	}
	return out, nil
}

func volumeCheck(c *cli.Context) error {
	type result struct {
		name string
		cfg  *volume.Config
		err  error
	}
	var results []result
	if c.NArg() == 0 {
		cfgs, listErr := volume.ListConfigs()
		bad, err := configErrors(listErr)
		if err != nil {
			return fmt.Errorf("volume check: %w", err)
		}
		for _, cfg := range cfgs {
			results = append(results, result{name: cfg.Name, cfg: cfg})
		}
		for _, fe := range bad {
			results = append(results, result{name: strings.TrimSuffix(filepath.Base(fe.path), ".conf"), err: fe.err})
		}
		sort.SliceStable(results, func(i, j int) bool { return results[i].name < results[j].name })
		if len(results) == 0 {
			fmt.Fprintf(c.App.ErrWriter, "no volumes in %s\n", volume.ConfigDirPath())
			return nil
		}
	} else {
		for _, name := range c.Args().Slice() {
			cfg, err := volume.LoadConfig(name)
			results = append(results, result{name: name, cfg: cfg, err: err})
		}
	}
	failed := 0
	for _, r := range results {
		err := r.err
		if err == nil {
			if errs := checkSecretFiles(r.cfg); len(errs) > 0 {
				err = volume.ConfigErrors(errs)
			}
		}
		if err != nil {
			failed++
			fmt.Fprintln(c.App.Writer, err)
			continue
		}
		fmt.Fprintf(c.App.Writer, "%s: ok\n", r.name)
	}
	if failed > 0 {
		return fmt.Errorf("volume check: %d of %d volume(s) invalid", failed, len(results))
	}
	return nil
}

// checkSecretFiles reports each secret file of cfg that is missing,
// unreadable, not a regular file, empty, or not private (permission bits
// for group or others: a secret file is mode 0600 or stricter), on the
// line of its key.
func checkSecretFiles(cfg *volume.Config) []*volume.ConfigError {
	var out []*volume.ConfigError
	for _, s := range []struct{ key, path string }{
		{"chap_secret_file", cfg.CHAPSecretFile}, {"mutual_secret_file", cfg.MutualSecretFile},
	} {
		if s.path == "" {
			continue
		}
		fail := func(format string, args ...any) {
			out = append(out, &volume.ConfigError{Path: cfg.Path, Line: volume.KeyLine(cfg.Path, s.key), Key: s.key, Reason: fmt.Sprintf(format, args...)})
		}
		fi, err := os.Stat(s.path)
		if err != nil {
			fail("%v", err)
			continue
		}
		if !fi.Mode().IsRegular() {
			fail("%s is not a regular file", s.path)
			continue
		}
		if _, _, err := readSecretFile(s.path); err != nil {
			fail("%v", err)
			continue
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			fail("%s is not private (mode %04o; chmod 600 %s)", s.path, perm, s.path)
		}
	}
	return out
}
