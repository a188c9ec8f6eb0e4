package main

import (
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
