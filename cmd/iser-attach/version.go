package main

// version.go: "iser-attach version" and "--version": the release, the git
// revision and the Go toolchain the binary was built from.

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/ublk"
)

// version is the release, set at link time by the Makefile
// (-ldflags "-X main.version=$(VERSION)", from VERSION or git describe).
var version string

// revision is the git commit the Makefile passes (-X main.revision) for
// builds Go cannot stamp with vcs.revision itself (a git worktree, whose
// .git is a file, or GOFLAGS=-buildvcs=false); vcs.revision wins.
var revision string

// versionInfo is what the binary knows about its build.
type versionInfo struct {
	Version  string // version, else the module version, else "devel"
	Revision string // vcs.revision ("-dirty" appended when vcs.modified), else revision, else "unknown"
	Go       string // runtime.Version()
	Platform string // GOOS/GOARCH
}

func buildVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	return versionFrom(version, revision, bi, ok)
}

// versionFrom combines the link-time strings and the build information.
func versionFrom(version, revision string, bi *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{Version: version, Revision: revision, Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if v.Revision == "" {
		v.Revision = "unknown"
	}
	if v.Version == "" {
		v.Version = "devel"
		if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
	}
	if !ok {
		return v
	}
	vcsRev, modified := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			vcsRev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if vcsRev != "" {
		v.Revision = vcsRev
		if modified {
			v.Revision += "-dirty"
		}
	}
	return v
}

func printVersion(w io.Writer) {
	v := buildVersion()
	fmt.Fprintf(w, "%s %s\nrevision: %s\ngo: %s %s\n", appName, v.Version, v.Revision, v.Go, v.Platform)
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the git revision and the Go version of this binary",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "also print the kernel release and its ublk features (GET_FEATURES): each flag, whether the kernel offers it, and what iser-attach does with it"},
		},
		Action: func(c *cli.Context) error {
			printVersion(c.App.Writer)
			if c.Bool("verbose") {
				ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
				defer cancel()
				return ublk.Probe(ctx).WriteTable(c.App.Writer)
			}
			return nil
		},
	}
}
