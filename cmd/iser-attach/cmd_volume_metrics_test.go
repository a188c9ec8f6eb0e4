package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/initiator"
	"github.com/iser-attach/iser-attach/volume"
)

// TestVolumeMetricsListen: volume add writes metrics_listen, rejects a bad
// address naming the flag, and attach --volume takes it from the file.
func TestVolumeMetricsListen(t *testing.T) {
	volumeEnv(t)
	if _, errs, err := runVolume(t, "add", "db", "--portal", "10.0.0.1", "--target", volTarget,
		"--initiator-name", "iqn.2026-11.io.iser-attach:host", "--metrics-listen", "tcp:127.0.0.1:9464"); err != nil {
		t.Fatalf("add: %v\n%s", err, errs)
	}
	cfg, err := volume.LoadConfig("db")
	if err != nil || cfg.MetricsListen != "tcp:127.0.0.1:9464" {
		t.Fatalf("written config: %v %+v", err, cfg)
	}
	_, _, err = runVolume(t, "add", "bad", "--portal", "10.0.0.1", "--target", volTarget, "--metrics-listen", "9464")
	if err == nil || !strings.HasPrefix(err.Error(), "volume add: --metrics-listen: ") {
		t.Fatalf("bad address: %v", err)
	}

	var sp *attachSpec
	app := &cli.App{Name: "iser-attach", ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{{Name: "attach", Flags: []cli.Flag{&cli.StringFlag{Name: "initiator-name"}},
			Action: func(c *cli.Context) (err error) {
				sp, err = specFromVolume(c, "db")
				return err
			}}}}
	if err := app.Run([]string{"iser-attach", "attach"}); err != nil {
		t.Fatal(err)
	}
	if sp.MetricsListen != "tcp:127.0.0.1:9464" {
		t.Fatalf("attach --volume db: MetricsListen %q", sp.MetricsListen)
	}
}

// TestVolumeReadOnly: volume add --read-only writes read_only = true,
// attach --volume takes it from the file, and a volume without it is
// writable.
func TestVolumeReadOnly(t *testing.T) {
	dir := volumeEnv(t)
	for _, name := range []string{"ro", "rw"} {
		args := []string{"add", name, "--portal", "10.0.0.1", "--target", volTarget, "--initiator-name", "iqn.2026-11.io.iser-attach:host"}
		if name == "ro" {
			args = append(args, "--read-only")
		}
		if _, errs, err := runVolume(t, args...); err != nil {
			t.Fatalf("add %s: %v\n%s", name, err, errs)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "ro.conf"))
	if err != nil || !strings.Contains(string(data), "\nread_only = true\n") {
		t.Fatalf("ro.conf: %v\n%s", err, data)
	}
	for name, want := range map[string]bool{"ro": true, "rw": false} {
		var sp *attachSpec
		app := &cli.App{Name: "iser-attach", ExitErrHandler: func(*cli.Context, error) {},
			Commands: []*cli.Command{{Name: "attach", Flags: []cli.Flag{&cli.StringFlag{Name: "initiator-name"}},
				Action: func(c *cli.Context) (err error) {
					sp, err = specFromVolume(c, name)
					return err
				}}}}
		if err := app.Run([]string{"iser-attach", "attach"}); err != nil {
			t.Fatal(err)
		}
		if sp.ReadOnly != want {
			t.Errorf("attach --volume %s: ReadOnly %v, want %v", name, sp.ReadOnly, want)
		}
	}
}

// TestAttachReadOnlyFlag: attach --read-only sets the spec's ReadOnly,
// without it the spec is writable; serve has the flag too.
func TestAttachReadOnlyFlag(t *testing.T) {
	volumeEnv(t)
	for _, c := range []struct {
		args []string
		want bool
	}{{[]string{"--read-only"}, true}, {nil, false}} {
		cmd := attachCommand()
		var sp *attachSpec
		cmd.Action = func(c *cli.Context) (err error) {
			sp, err = attachSpecFrom(c)
			return err
		}
		app := &cli.App{Name: "iser-attach", ExitErrHandler: func(*cli.Context, error) {},
			Flags: []cli.Flag{&cli.StringFlag{Name: "initiator-name", Value: "iqn.2026-11.io.iser-attach:host"}}, Commands: []*cli.Command{cmd}}
		args := append([]string{"iser-attach", "attach", "--portal", "10.0.0.1", "--target", volTarget}, c.args...)
		if err := app.Run(args); err != nil {
			t.Fatal(err)
		}
		if sp.ReadOnly != c.want {
			t.Errorf("attach %q: ReadOnly %v, want %v", c.args, sp.ReadOnly, c.want)
		}
	}
	found := false
	for _, f := range serveCommand().Flags {
		found = found || f.Names()[0] == "read-only"
	}
	if !found {
		t.Error("serve has no --read-only")
	}
}

// TestVolumeMultipathKeys: volume add --all-portals --path-selector
// queue-length writes all_portals = true and path_selector =
// queue-length, and attach --volume takes both from the file; a volume
// without them has neither (round-robin); a selector volume add does not
// know is refused naming the flag.
func TestVolumeMultipathKeys(t *testing.T) {
	dir := volumeEnv(t)
	for _, name := range []string{"mp", "plain"} {
		args := []string{"add", name, "--portal", "10.0.0.1", "--portal", "10.0.0.2", "--target", volTarget,
			"--initiator-name", "iqn.2026-11.io.iser-attach:host"}
		if name == "mp" {
			args = append(args, "--all-portals", "--path-selector", "queue-length")
		}
		if _, errs, err := runVolume(t, args...); err != nil {
			t.Fatalf("add %s: %v\n%s", name, err, errs)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "mp.conf"))
	if err != nil || !strings.Contains(string(data), "\nall_portals = true\n") || !strings.Contains(string(data), "\npath_selector = queue-length\n") {
		t.Fatalf("mp.conf: %v\n%s", err, data)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "plain.conf")); strings.Contains(string(data), "all_portals") || strings.Contains(string(data), "path_selector") {
		t.Fatalf("plain.conf has multipath keys it was not given:\n%s", data)
	}
	for name, want := range map[string]struct {
		all bool
		sel initiator.PathSelector
	}{"mp": {true, initiator.SelectQueueLength}, "plain": {false, initiator.SelectRoundRobin}} {
		var sp *attachSpec
		app := &cli.App{Name: "iser-attach", ExitErrHandler: func(*cli.Context, error) {},
			Commands: []*cli.Command{{Name: "attach", Flags: []cli.Flag{&cli.StringFlag{Name: "initiator-name"}},
				Action: func(c *cli.Context) (err error) {
					sp, err = specFromVolume(c, name)
					return err
				}}}}
		if err := app.Run([]string{"iser-attach", "attach"}); err != nil {
			t.Fatal(err)
		}
		if sp.AllPortals != want.all || sp.PathSelector != want.sel {
			t.Errorf("attach --volume %s: AllPortals %v, PathSelector %v; want %v, %v", name, sp.AllPortals, sp.PathSelector, want.all, want.sel)
		}
	}
	_, errs, err := runVolume(t, "add", "bad", "--portal", "10.0.0.1", "--target", volTarget, "--path-selector", "service-time")
	if err == nil || !strings.Contains(err.Error()+errs, "--path-selector") {
		t.Errorf("volume add --path-selector service-time: %v %s; want an error naming --path-selector", err, errs)
	}
}

// TestAttachPathSelectorFlag: attach and serve take --path-selector
// (round-robin by default); an unknown selector is a usage error naming
// the flag.
func TestAttachPathSelectorFlag(t *testing.T) {
	volumeEnv(t)
	for _, c := range []struct {
		args []string
		want initiator.PathSelector
		err  string
	}{
		{nil, initiator.SelectRoundRobin, ""},
		{[]string{"--path-selector", "queue-length"}, initiator.SelectQueueLength, ""},
		{[]string{"--path-selector", "round-robin"}, initiator.SelectRoundRobin, ""},
		{[]string{"--path-selector", "least-queue"}, 0, "--path-selector"},
	} {
		cmd := attachCommand()
		var sp *attachSpec
		cmd.Action = func(c *cli.Context) (err error) {
			sp, err = attachSpecFrom(c)
			return err
		}
		app := &cli.App{Name: "iser-attach", ExitErrHandler: func(*cli.Context, error) {}, Writer: io.Discard, ErrWriter: io.Discard,
			Flags: []cli.Flag{&cli.StringFlag{Name: "initiator-name", Value: "iqn.2026-11.io.iser-attach:host"}}, Commands: []*cli.Command{cmd}}
		args := append([]string{"iser-attach", "attach", "--portal", "10.0.0.1", "--portal", "10.0.0.2", "--target", volTarget}, c.args...)
		err := app.Run(args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("attach %q: %v; want an error naming %s", c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if sp.PathSelector != c.want {
			t.Errorf("attach %q: PathSelector %v, want %v", c.args, sp.PathSelector, c.want)
		}
	}
	found := false
	for _, f := range serveCommand().Flags {
		found = found || f.Names()[0] == "path-selector"
	}
	if !found {
		t.Error("serve has no --path-selector")
	}
}
