// Command iser-attach attaches remote iSCSI LUNs over iSER or iSCSI/TCP and
// serves them as NBD exports (and, later, block devices).
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/initiator"
)

const appName = "iser-attach"

func main() {
	app := newApp()
	if err := runApp(app, os.Args); err != nil {
		printFinalError(err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) && ec.ExitCode() != 0 {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

// oneLine keeps an error message to one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func newApp() *cli.App {
	app := &cli.App{
		Name:    appName,
		Version: buildVersion().Version,
		Description: "Flags may come before or after a command's arguments; global options may follow the command. " +
			"Volumes are configured in /etc/iser-attach/volumes/NAME.conf (iser-attach volume add) and attached at boot by " +
			"iser-attach@NAME.service as /dev/iser/NAME.\n\n" +
			"Exit status: 0 on success, 1 when the operation failed, 2 for a usage mistake (an unknown command or flag, " +
			"a bad or missing value, a wrong number of arguments), 3 when the target refused the login for a reason " +
			"that retrying cannot fix (authentication or authorization failed, no such target, unsupported version: " +
			"iSCSI login status class 2; a failed mutual CHAP; CHAP required and no credentials given). " +
			"attach does not retry such a login, under systemd either, and its unit is not restarted.\n\n" +
			"Durations (--login-timeout, --command-timeout, --interval...) are seconds (30) or Go durations (30s, 2m). " +
			"A portal is host, host:port or [v6]:port, optionally with the ,TPGT iscsiadm prints (10.0.0.1:3260,1); " +
			"several portals are several --portal flags, never a comma-separated list.",
		Usage: "a userspace iSER/iSCSI initiator: discover targets, attach LUNs as block devices (ublk, nbd) or serve them over NBD",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "initiator-name", Usage: "initiator IQN (default: /etc/iscsi/initiatorname.iscsi, else a generated IQN kept in /var/lib/iser-attach)", EnvVars: []string{"ISER_ATTACH_INITIATOR_NAME"}},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "trace, debug, info, warn, error"},
			&cli.StringFlag{Name: "log-format", Value: "console", Usage: "console or json"},
			&cli.StringFlag{Name: "cpu-profile", Hidden: true, Usage: "write a Go CPU profile to FILE until exit"},
		},
		Before: func(c *cli.Context) error {
			if err := setupLogger(c); err != nil {
				return err
			}
			if n := c.String("initiator-name"); n != "" {
				if err := initiator.CheckName(n); err != nil {
					return usageErrorf(nil, "--initiator-name: %v", err)
				}
			}
			return startProfile(c.String("cpu-profile"))
		},
		After: func(*cli.Context) error {
			stopProfile()
			return nil
		},
		Commands: []*cli.Command{
			discoverCommand(),
			infoCommand(),
			serveCommand(),
			attachCommand(),
			detachCommand(),
			resizeCommand(),
			listCommand(),
			statsCommand(),
			volumeCommand(),
			rdmaCommand(),
			versionCommand(),
			csiCommand(),
			genCompletionCommand(),
		},
		OnUsageError: onUsageError,
		// A comma never splits a flag's value: 10.0.0.1:3260,1 is one
		// portal (iscsiadm's ip:port,tpgt); several are several flags.
		DisableSliceFlagSeparator: true,
		ExitErrHandler:            func(*cli.Context, error) {}, // main prints errors
	}
	setUsageErrorHandlers(app.Commands)
	return app
}

func init() {
	cli.VersionPrinter = func(c *cli.Context) { printVersion(c.App.Writer) }
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version, the git revision and the Go version"}
}

var profileFile *os.File

// startProfile starts a CPU profile (performance work; --cpu-profile).
func startProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	profileFile = f
	return pprof.StartCPUProfile(f)
}

func stopProfile() {
	if profileFile != nil {
		pprof.StopCPUProfile()
		profileFile.Close()
		profileFile = nil
	}
}
