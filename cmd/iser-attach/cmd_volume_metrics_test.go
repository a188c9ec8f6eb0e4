package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

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
