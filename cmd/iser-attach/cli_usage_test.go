package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// runBinary runs the built binary (TestMain) with exactly args and returns
// stdout, stderr and the exit status.
func runBinary(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("%s %q: %v", bin, args, err)
	return "", "", -1
}

// Every usage mistake is one line on stderr naming it and the help to read,
// and exit status 2.
func TestCLIUsageMistakes(t *testing.T) {
	serveOK := []string{"serve", "--portal", "127.0.0.1", "--target", "iqn.2026-11.test:x", "--listen", "unix:/nonexistent/s"}
	cases := []struct {
		name string
		env  []string
		args []string
		want string // the whole line after "iser-attach: " starts with it
		help string // the command whose help the line points at
	}{
		{"unknown flag", nil, []string{"serve", "--foo"}, "serve: flag provided but not defined: -foo", "serve"},
		{"unknown flag after arguments", nil, []string{"detach", "vol", "--foo"}, "detach: flag provided but not defined: -foo", "detach"},
		{"resize without a volume", nil, []string{"resize"}, "resize: expected one NAME|DEVICE, got 0 arguments", "resize"},
		{"resize of two", nil, []string{"resize", "a", "b"}, "resize: expected one NAME|DEVICE, got 2 arguments", "resize"},
		{"unknown flag to resize", nil, []string{"resize", "--bogus", "x"}, "resize: flag provided but not defined: -bogus", "resize"},
		{"unknown global flag", nil, []string{"--foo", "list"}, "flag provided but not defined: -foo", ""},
		{"unknown subcommand flag", nil, []string{"volume", "check", "--json"}, "volume check: flag provided but not defined: -json", "volume check"},
		{"flag of another command", nil, []string{"list", "--listen", "x"}, "list: flag provided but not defined: -listen; serve takes it", "list"},
		{"recovery flag to info", nil, []string{"info", "--portal", "p", "--replacement-timeout", "5"},
			"info: flag provided but not defined: -replacement-timeout; serve, attach and volume add take it", "info"},
		{"bad uint", nil, append(serveOK, "--lun", "abc"), `serve: invalid value "abc" for flag -lun`, "serve"},
		{"bad uint before the command's other flags", nil, []string{"info", "--lun=-1", "--portal", "p"}, `info: invalid value "-1" for flag -lun`, "info"},
		{"bad duration", nil, append(serveOK, "--login-timeout", "soon"), `serve: --login-timeout: "soon" is not a duration: give seconds (30) or a Go duration (30s, 2m)`, "serve"},
		{"bad int in a subcommand", nil, []string{"volume", "add", "v", "--queue-depth", "many"}, `volume add: invalid value "many" for flag -queue-depth`, "volume add"},
		{"missing value", nil, []string{"volume", "add", "v", "--lun"}, "volume add: flag needs an argument: -lun", "volume add"},
		{"missing global value", nil, []string{"list", "--log-level"}, "list: flag needs an argument: -log-level", "list"},
		{"missing required flag", nil, []string{"serve", "--portal", "127.0.0.1", "--target", "iqn.2026-11.test:x"}, "serve: required flag --listen not given", "serve"},
		{"missing --portal", nil, []string{"info", "--target", "iqn.2026-11.test:x"}, "info: required flag --portal not given", "info"},
		{"missing --target", nil, []string{"serve", "--listen", "unix:/nonexistent/s", "--portal", "127.0.0.1"}, "serve: required flag --target not given", "serve"},
		{"LUN out of range", nil, []string{"info", "--portal", "127.0.0.1", "--target", "iqn.2026-11.test:x", "--lun", "16384"}, "info: --lun 16384: at most 16383", "info"},
		{"missing required subcommand flag", nil, []string{"rdma", "setup"}, "rdma setup: required flag --netdev not given", "rdma setup"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate" (see`, ""},
		{"mistyped command", nil, []string{"atach"}, `unknown command "atach"; did you mean attach?`, ""},
		{"mistyped subcommand", nil, []string{"volume", "chek"}, `volume: unknown command "chek"; did you mean check?`, "volume"},
		{"mistyped flag", nil, []string{"list", "--jsn"}, `list: flag provided but not defined: -jsn; did you mean --json?`, "list"},
		{"unknown command after global flags", nil, []string{"--log-level", "debug", "lsit"}, `unknown command "lsit"; did you mean list?`, ""},
		{"unknown subcommand", nil, []string{"volume", "ad"}, `volume: unknown command "ad"`, "volume"},
		{"stray argument", nil, []string{"list", "extra"}, `list: expected no arguments, got ["extra"]`, "list"},
		{"stray argument to serve", nil, append(serveOK, "extra"), `serve: expected no arguments, got ["extra"]`, "serve"},
		{"stray argument to version", nil, []string{"version", "1"}, `version: expected no arguments`, "version"},
		{"missing portal", nil, []string{"discover"}, "discover: no portal: give PORTAL or --portal", "discover"},
		{"two arguments", nil, []string{"discover", "a", "b", "--json"}, "discover: expected [PORTAL], got 2 arguments", "discover"},
		{"portal and --portal differ", nil, []string{"discover", "a:1", "--portal", "b:1"}, "discover: PORTAL a:1 and --portal b:1 differ", "discover"},
		{"missing detach argument", nil, []string{"detach", "--force"}, "detach: expected one NAME|DEVICE, got 0 arguments", "detach"},
		{"missing volume name", nil, []string{"volume", "remove"}, "volume remove: expected one NAME, got 0 arguments", "volume remove"},
		{"bad --log-level", nil, []string{"--log-level", "loud", "list"}, "--log-level: ", ""},
		{"bad --log-format after the command", nil, []string{"list", "--log-format", "xml"}, `--log-format: "xml" is neither json nor console`, ""},
		{"help for an unknown command", nil, []string{"help", "frobnicate"}, `unknown command "frobnicate"`, ""},
		{"help for an unknown subcommand", nil, []string{"help", "volume", "frobnicate"}, `volume: unknown command "frobnicate"`, "volume"},
		{"help with an argument", nil, []string{"help", "serve", "now"}, `serve: "now" is not a command`, "serve"},
		{"gen-completion for fish", nil, []string{"gen-completion", "fish"}, `gen-completion: "fish": want bash or zsh`, "gen-completion"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := runBinary(t, binary, c.env, c.args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "\n") {
				t.Fatalf("stderr is not one line:\n%s", errs)
			}
			line := strings.TrimSuffix(errs, "\n")
			if !strings.HasPrefix(line, "iser-attach: "+c.want) {
				t.Errorf("stderr %q, want it to start with %q", line, "iser-attach: "+c.want)
			}
			hint := "(see 'iser-attach help')"
			if c.help != "" {
				hint = "(see 'iser-attach help " + c.help + "')"
			}
			if !strings.HasSuffix(line, hint) {
				t.Errorf("stderr %q, want it to end with %q", line, hint)
			}
		})
	}
}

// TestCLIFlagValueMistakes: every mistake in a flag's value, or in a
// combination of flags, is a usage error (exit 2, one line, the pointer to
// the command's help), found before any connection (the portal is closed:
// had it been tried, the error would say so): one row per command and
// mistake at least.
func TestCLIFlagValueMistakes(t *testing.T) {
	const closed = "127.0.0.1:1"
	const tgt = "iqn.2026-11.test:x"
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("a-secret-of-16-bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	info := []string{"info", "--portal", closed, "--target", tgt}
	serve := []string{"serve", "--portal", closed, "--target", tgt, "--listen", "unix:/nonexistent/s"}
	attach := []string{"attach", "--portal", closed, "--target", tgt}
	add := []string{"volume", "add", "v", "--portal", closed, "--target", tgt}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	cases := []struct {
		args []string
		want string // after "iser-attach: "
		help string
	}{
		// The list (#18), one per command that takes the flag.
		{with(info[:3], "--target", "disks"), `info: --target: "disks" is not an iSCSI name`, "info"},
		{with(serve[:3], "--target", "disks", "--listen", "unix:/nonexistent/s"), `serve: --target: "disks" is not an iSCSI name`, "serve"},
		{with(attach[:3], "--target", "disks"), `attach: --target: "disks" is not an iSCSI name`, "attach"},
		{with(add[:5], "--target", "disks"), `volume add: --target: "disks" is not an iSCSI name`, "volume add"},
		{with([]string{"--initiator-name", "myhost"}, info...), `--initiator-name: "myhost" is not an iSCSI name`, ""},
		{[]string{"discover", closed, "--initiator-name", "myhost"}, `--initiator-name: "myhost" is not an iSCSI name`, ""},
		{with(add, "--initiator-name", "myhost"), `volume add: --initiator-name: "myhost" is not an iSCSI name`, "volume add"},
		{with(info, "--transport", "rdma"), `info: --transport "rdma": want auto, iser or tcp`, "info"},
		{with(serve, "--transport", "rdma"), `serve: --transport "rdma": want auto, iser or tcp`, "serve"},
		{with(attach, "--transport", "rdma"), `attach: --transport "rdma": want auto, iser or tcp`, "attach"},
		{with(add, "--transport", "rdma"), `volume add: --transport: "rdma": want auto, iser, tcp`, "volume add"},
		{with(serve[:5], "--listen", "/tmp/x.sock"), `serve: --listen: nbd listen "/tmp/x.sock": want unix:PATH or tcp:HOST:PORT`, "serve"},
		{with(serve[:5], "--listen", "tcp:0.0.0.0:10809"), `serve: --listen tcp:0.0.0.0:10809 is reachable from other hosts`, "serve"},
		{with(serve, "--metrics-listen", "9464"), `serve: --metrics-listen: nbd listen "9464"`, "serve"},
		{with(attach, "--metrics-listen", "9464"), `attach: --metrics-listen: nbd listen "9464"`, "attach"},
		{with(info, "--chap-secret-file", secret), "info: --chap-secret-file given without --chap-user", "info"},
		{with(serve, "--chap-secret-file", secret), "serve: --chap-secret-file given without --chap-user", "serve"},
		{with(attach, "--chap-secret-file", secret), "attach: --chap-secret-file given without --chap-user", "attach"},
		{[]string{"discover", closed, "--chap-secret-file", secret}, "discover: --chap-secret-file given without --chap-user", "discover"},
		{with(add, "--chap-secret-file", secret), "volume add: --chap-secret-file: needs --chap-user", "volume add"},
		{with(info, "--mutual-user", "t"), "info: mutual CHAP needs --chap-user", "info"},
		{with(info, "--chap-user", "u"), `info: --chap-user "u" needs a secret`, "info"},
		// Other values.
		{with(info, "--portal", "10.0.0.1:3260,1,10.0.0.2:3260,1"), `info: --portal: portal "10.0.0.1:3260,1,10.0.0.2:3260,1": parse portal`, "info"},
		{[]string{"discover", "10.0.0.1:3260,x"}, `discover: portal "10.0.0.1:3260,x": parse portal`, "discover"},
		{with(serve, "--queue-depth", "0"), "serve: --queue-depth 0: want 1 to 1024", "serve"},
		{with(attach, "--queue-depth", "2000"), "attach: --queue-depth 2000: want 1 to 1024", "attach"},
		{with(serve, "--max-connections", "0"), "serve: --max-connections and --max-in-flight must be at least 1", "serve"},
		{with(serve, "--reservation-key", "0"), `serve: --reservation-key "0": key 0 means no key`, "serve"},
		{with(attach, "--reservation-key", "0x12345678901234567"), `attach: --reservation-key "0x12345678901234567": want 1 to 16 hex digits`, "attach"},
		{with(attach, "--reservation-key", "node-a"), `attach: --reservation-key "node-a": want hex digits`, "attach"},
		{with(serve, "--preempt"), "serve: --preempt needs --reservation-key", "serve"},
		{with(attach, "--queues", "0"), "attach: --queues 0: want 1 to 4096", "attach"},
		{with(attach, "--nbd-connections", "65"), "attach: --nbd-connections 65: want 1 to 64", "attach"},
		{with(attach, "--io-scheduler", "mq deadline"), `attach: --io-scheduler: "mq deadline": want keep or a scheduler name`, "attach"},
		{with(add, "--io-scheduler", "None"), `volume add: --io-scheduler: "None": want keep or a scheduler name`, "volume add"},
		{with(attach, "--frontend", "loop"), `attach: --frontend "loop": want ublk or nbd`, "attach"},
		{with(attach, "--name", "a/b"), `attach: --name: volume name "a/b"`, "attach"},
		{[]string{"attach", "--volume", "a/b"}, `attach: --volume: volume name "a/b"`, "attach"},
		{[]string{"volume", "add", "a/b", "--portal", closed, "--target", tgt}, `volume add: volume name "a/b"`, "volume add"},
		{[]string{"volume", "remove", "a/b"}, `volume remove: volume name "a/b"`, "volume remove"},
		{with(add, "--queue-depth", "0"), "volume add: --queue-depth: \"0\": want a number from 1 to 1024", "volume add"},
		{with(add, "--lun", "20000"), "volume add: --lun 20000: at most 16383", "volume add"},
		// Durations: a plain number is seconds; the error names the flag and both forms.
		{with(info, "--command-timeout", "abc"), `info: --command-timeout: "abc" is not a duration: give seconds (30) or a Go duration (30s, 2m)`, "info"},
		{with(info, "--login-timeout=soon"), `info: --login-timeout: "soon" is not a duration: give seconds (30) or a Go duration (30s, 2m)`, "info"},
		{with(info, "--command-timeout", "0"), "info: --command-timeout 0s: must be positive", "info"},
		{with(serve, "--nop-interval", "-5"), "serve: --nop-interval -5s: must not be negative", "serve"},
		{with(attach, "--replacement-timeout", "-1"), "attach: --replacement-timeout -1s: must not be negative", "attach"},
		{with(attach, "--nop-timeout", "0"), "attach: --nop-timeout 0s: must be positive", "attach"},
		{with(add, "--nop-timeout", "1x"), `volume add: --nop-timeout: "1x" is not a duration: give seconds (30) or a Go duration (30s, 2m)`, "volume add"},
		{with(add, "--command-timeout", "0"), "volume add: --command-timeout: 0s: must be more than 0", "volume add"},
		{[]string{"discover", closed, "--timeout", "0"}, "discover: --timeout 0s: must be positive", "discover"},
		{[]string{"discover", closed, "--timeout", "1 minute"}, `discover: --timeout: "1 minute" is not a duration`, "discover"},
		{[]string{"stats", "--interval", "0"}, "stats: --interval must be positive", "stats"},
		{[]string{"stats", "--interval", "often"}, `stats: --interval: "often" is not a duration`, "stats"},
		{[]string{"stats", "--count", "-1"}, "stats: --interval must be positive and --count not negative", "stats"},
		{[]string{"detach", "--force=maybe", "x"}, `detach: invalid boolean value "maybe" for -force`, "detach"},
		{[]string{"list", "--json=maybe"}, `list: invalid boolean value "maybe" for -json`, "list"},
		{[]string{"volume", "list", "--json=maybe"}, `volume list: invalid boolean value "maybe" for -json`, "volume list"},
		{[]string{"rdma", "list", "--json=maybe"}, `rdma list: invalid boolean value "maybe" for -json`, "rdma list"},
		{[]string{"volume", "remove", "v", "--force=maybe"}, `volume remove: invalid boolean value "maybe" for -force`, "volume remove"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			env := []string{"ISER_ATTACH_CONFIG_DIR=" + t.TempDir(), "ISER_ATTACH_CHAP_SECRET=", "ISER_ATTACH_MUTUAL_SECRET="}
			args := c.args
			if c.args[0] != "--initiator-name" && !(len(c.args) > 1 && c.args[0] == "volume") {
				args = append([]string{"--initiator-name", "iqn.2026-11.test:init"}, c.args...)
			}
			out, errs, code := runBinary(t, binary, env, args...)
			if code != 2 || out != "" {
				t.Errorf("exit status %d, stdout %q; want 2 and nothing", code, out)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "\n") {
				t.Fatalf("stderr is not one line:\n%s", errs)
			}
			line := strings.TrimSuffix(errs, "\n")
			if !strings.HasPrefix(line, "iser-attach: "+c.want) {
				t.Errorf("stderr %q, want it to start with %q", line, "iser-attach: "+c.want)
			}
			hint := "(see 'iser-attach help')"
			if c.help != "" {
				hint = "(see 'iser-attach help " + c.help + "')"
			}
			if !strings.HasSuffix(line, hint) {
				t.Errorf("stderr %q, want it to end with %q", line, hint)
			}
		})
	}
}

// A runtime failure (nothing wrong on the command line) still exits 1.
func TestCLIRuntimeFailureExits1(t *testing.T) {
	_, errs, code := runBinary(t, binary, nil, "info", "--portal", "127.0.0.1:1", "--target", "iqn.2026-11.test:x", "--login-timeout", "5s")
	if code != 1 || !strings.Contains(errs, "connection refused") {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errs)
	}
}

// Flags may follow the arguments on every command, global flags may follow
// the command, and "--" ends the flags: against a real tgtd.
func TestCLIFlagsAnywhere(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:anywhere"})
	for _, args := range [][]string{
		{"discover", srv.Portal(), "--json"},
		{"discover", "--log-format", "json", srv.Portal(), "--json", "--initiator-name", initiatorIQN},
		{"--initiator-name", initiatorIQN, "discover", srv.Portal(), "--json=true", "--log-level=debug"},
		{"discover", "--json", "--", srv.Portal()},
	} {
		out, errs, code := runBinary(t, binary, nil, args...)
		if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "[") || !strings.Contains(out, "iqn.2026-11.test:anywhere") {
			t.Fatalf("%q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errs)
		}
	}
	// info's flags in any order, --json last, a global flag in between.
	out, errs, code := runBinary(t, binary, nil, "info", "--portal", srv.Portal(), "--log-level", "warn", "--target",
		"iqn.2026-11.test:anywhere", "--lun", "1", "--json")
	if code != 0 || !strings.Contains(out, `"block_size"`) {
		t.Fatalf("info: exit %d\n%s\n%s", code, out, errs)
	}
	// "--" makes a flag-like word an argument: here a volume name detach
	// must look for (and not find), not an unknown flag.
	_, errs, code = runBinary(t, binary, nil, "detach", "--", "-odd")
	if code == 2 || strings.Contains(errs, "flag provided") {
		t.Fatalf("detach -- -odd: exit %d: %s", code, errs)
	}
}

// help COMMAND, COMMAND --help and help COMMAND SUBCOMMAND print the
// command's help on stdout and exit 0.
func TestCLIHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "iser-attach [global options] command"},
		{[]string{"--help"}, "iser-attach [global options] command"},
		{[]string{"help", "serve"}, "iser-attach serve [command options]"},
		{[]string{"serve", "--help"}, "iser-attach serve [command options]"},
		{[]string{"help", "volume", "add"}, "iser-attach volume add [command options] NAME"},
		{[]string{"volume", "help", "add"}, "iser-attach volume add [command options] NAME"},
		{[]string{"volume", "add", "x", "--help"}, "iser-attach volume add [command options] NAME"},
		{[]string{"help", "volume"}, "iser-attach volume [command options]"},
	} {
		out, errs, code := runBinary(t, binary, nil, tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%q: exit %d, stdout lacks %q:\n%s\nstderr:\n%s", tc.args, code, tc.want, out, errs)
		}
	}
	out, _, _ := runBinary(t, binary, nil, "help")
	for _, hidden := range []string{"gen-man", "gen-completion"} {
		if strings.Contains(out, hidden) {
			t.Errorf("help lists the hidden %s", hidden)
		}
	}
}

// The version comes from -X main.version, the revision from vcs.revision
// or -X main.revision, the Go version from the runtime.
func TestCLIVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "iser-attach")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin,
		"-ldflags", "-X main.version=9.8.7-test -X main.revision=0123456789abcdef", ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	want := "iser-attach 9.8.7-test\nrevision: 0123456789abcdef\ngo: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}, {"--log-level", "debug", "version"}} {
		out, errs, code := runBinary(t, bin, nil, args...)
		if code != 0 || out != want {
			t.Errorf("%q: exit %d, printed %q, want %q; stderr %q", args, code, out, want, errs)
		}
	}
	// Without -X: "devel" and no revision rather than empty fields.
	out, _, code := runBinary(t, binary, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "iser-attach devel\nrevision: ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("plain build: exit %d, %q", code, out)
	}
}

func TestVersionFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}
	if v := versionFrom("1.0", "fallback", bi, true); v.Version != "1.0" || v.Revision != "abc-dirty" {
		t.Errorf("vcs stamped: %+v", v)
	}
	bi.Settings[1].Value = "false"
	if v := versionFrom("", "", bi, true); v.Version != "devel" || v.Revision != "abc" {
		t.Errorf("clean, no -X: %+v", v)
	}
	bi = &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}
	if v := versionFrom("", "fallback", bi, true); v.Version != "v1.2.3" || v.Revision != "fallback" {
		t.Errorf("module version, -X revision: %+v", v)
	}
	if v := versionFrom("", "", nil, false); v.Version != "devel" || v.Revision != "unknown" || v.Go != runtime.Version() {
		t.Errorf("no build info: %+v", v)
	}
}

func TestNormalizeArgs(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		{[]string{"volume", "add", "db", "--portal", "p", "--force"}, []string{"volume", "add", "--portal", "p", "--force", "db"}},
		{[]string{"list", "--json", "--log-level", "debug"}, []string{"--log-level", "debug", "list", "--json"}},
		{[]string{"detach", "--", "-x"}, []string{"detach", "--", "-x"}},
		{[]string{"detach", "x", "--force=true"}, []string{"detach", "--force=true", "x"}},
		// A command's own flag wins over the global one of the same name.
		{[]string{"volume", "add", "v", "--initiator-name", "iqn.x"}, []string{"volume", "add", "--initiator-name", "iqn.x", "v"}},
		{[]string{"help", "volume", "add"}, []string{"volume", "add", "--help"}},
		{[]string{"h"}, []string{"--help"}},
		{[]string{"serve", "--help"}, []string{"serve", "--help"}},     // no required-flag error
		{[]string{"detach", "a", "b", "-h"}, []string{"detach", "-h"}}, // help, whatever the arguments
		{[]string{"--version", "list"}, []string{"--version", "list"}}, // urfave/cli prints the version
		{[]string{"volume", "list", "-json"}, []string{"volume", "list", "-json"}},
	} {
		got, err := normalizeArgs(newApp(), append([]string{"iser-attach"}, tc.in...))
		if err != nil || !reflect.DeepEqual(got[1:], tc.want) {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	// A required flag may come from its environment variable.
	app := &cli.App{Name: "iser-attach", Commands: []*cli.Command{{Name: "x", Flags: []cli.Flag{
		&cli.StringFlag{Name: "need", Required: true, EnvVars: []string{"ISER_ATTACH_TEST_NEED"}}}}}}
	if _, err := normalizeArgs(app, []string{"iser-attach", "x"}); err == nil || !strings.Contains(err.Error(), "required flag --need") {
		t.Errorf("required flag missing: %v", err)
	}
	t.Setenv("ISER_ATTACH_TEST_NEED", "v")
	if _, err := normalizeArgs(app, []string{"iser-attach", "x"}); err != nil {
		t.Errorf("required flag set by its environment variable: %v", err)
	}
}

// version --verbose adds the kernel and its ublk features; on a host
// without ublk_drv (the development host) one line says so, exit 0.
func TestVersionVerbose(t *testing.T) {
	out, errs, code := runBinary(t, binary, nil, "version", "--verbose")
	if code != 0 || !strings.Contains(out, "\nkernel: Linux ") {
		t.Fatalf("exit %d, %q, stderr %q", code, out, errs)
	}
	if _, err := os.Stat("/dev/ublk-control"); err != nil {
		if !strings.Contains(out, "\nublk: no features known: ublk: kernel lacks ublk_drv") {
			t.Errorf("without ublk_drv: %q", out)
		}
	} else if !strings.Contains(out, "UBLK_F_UPDATE_SIZE") {
		t.Errorf("with ublk_drv, no feature table: %q", out)
	}
}
