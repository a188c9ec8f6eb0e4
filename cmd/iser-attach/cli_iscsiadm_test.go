package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/internal/tgttest"
)

// TestCLIPortalGroupTag: a portal as iscsiadm prints it (ip:port,tpgt) is
// one portal for --portal, discover's PORTAL and a volume file, and the
// tag is checked against the one tgtd answers (1): the right tag logs in,
// another fails the login in one line naming both.
func TestCLIPortalGroupTag(t *testing.T) {
	const iqn = "iqn.2026-11.test:tpgt"
	srv := tgttest.Start(t, tgttest.Target{IQN: iqn})
	tagged := srv.Portal() + ",1"
	out, errs, code := runBinary(t, binary, nil, "--initiator-name", initiatorIQN, "info", "--portal", tagged,
		"--target", iqn, "--lun", "1", "--json", "--command-timeout", "30", "--login-timeout", "10")
	if code != 0 || !strings.Contains(out, `"block_size"`) {
		t.Fatalf("info --portal %s: exit %d\n%s\n%s", tagged, code, out, errs)
	}
	out, errs, code = runBinary(t, binary, nil, "--initiator-name", initiatorIQN, "discover", tagged)
	if code != 0 || !strings.Contains(out, iqn) {
		t.Fatalf("discover %s: exit %d\n%s\n%s", tagged, code, out, errs)
	}

	wrong := srv.Portal() + ",2"
	_, errs, code = runBinary(t, binary, nil, "--initiator-name", initiatorIQN, "--log-level", "error", "info",
		"--portal", wrong, "--target", iqn, "--lun", "1")
	want := "iser-attach: login to " + iqn + " at " + srv.Portal() + ": the target answered portal group tag 1, the portal was given with tag 2 (" + wrong + ")\n"
	if code != 1 || errs != want {
		t.Fatalf("info --portal %s: exit %d, stderr %q; want 1 and %q", wrong, code, errs, want)
	}

	// A volume file: portal = ip:port,tpgt lines, one portal each.
	dir := t.TempDir()
	_, port, _ := strings.Cut(srv.Portal(), ":")
	local := "localhost:" + port // the same portal, another name: a volume file lists a portal once
	conf := "portal = " + wrong + "\nportal = " + local + ",1\ntarget = " + iqn + "\nlun = 1\nlogin_timeout = 10\n"
	if err := os.WriteFile(filepath.Join(dir, "tpgt.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var sp *attachSpec
	app := &cli.App{Name: "iser-attach", ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{{Name: "attach", Flags: []cli.Flag{&cli.StringFlag{Name: "initiator-name"}},
			Action: func(c *cli.Context) (err error) {
				sp, err = specFromVolume(c, "tpgt")
				return err
			}}}}
	t.Setenv("ISER_ATTACH_CONFIG_DIR", dir)
	if err := app.Run([]string{"iser-attach", "attach", "--initiator-name", initiatorIQN}); err != nil {
		t.Fatal(err)
	}
	if len(sp.Portals) != 2 || sp.Portals[0] != srv.Portal() || sp.PortalTags[0] != 2 || sp.PortalTags[1] != 1 {
		t.Fatalf("volume file portals %q tags %v", sp.Portals, sp.PortalTags)
	}
	l, err := openLUN(t.Context(), &sp.lunSpec)
	if err != nil {
		t.Fatalf("open with the second portal's tag right: %v", err)
	}
	defer l.Close()
	if st := l.nx.Status(); st.Portal != local {
		t.Fatalf("portal %s", st.Portal)
	}
}

// TestCLIFlagsDescribed: every flag of every command (hidden ones aside)
// says what it does, and info offers none of the flags of a lasting
// session (recovery, keepalive, queue depth).
func TestCLIFlagsDescribed(t *testing.T) {
	app := newApp()
	var walk func(path string, flags []cli.Flag, cmds []*cli.Command)
	walk = func(path string, flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			d, ok := f.(cli.DocGenerationFlag)
			if !ok {
				t.Errorf("%s --%s: no usage text to check", path, f.Names()[0])
				continue
			}
			if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
				continue
			}
			if strings.TrimSpace(d.GetUsage()) == "" {
				t.Errorf("%s --%s has no description", path, f.Names()[0])
			}
		}
		for _, c := range cmds {
			walk(strings.TrimSpace(path+" "+c.Name), c.Flags, c.Subcommands)
		}
	}
	walk("iser-attach", app.Flags, app.Commands)

	out, _, code := runBinary(t, binary, nil, "info", "--help")
	if code != 0 {
		t.Fatalf("info --help: exit %d", code)
	}
	for _, f := range []string{"--replacement-timeout", "--nop-interval", "--nop-timeout", "--queue-depth"} {
		if strings.Contains(out, f) {
			t.Errorf("info --help offers %s:\n%s", f, out)
		}
	}
	for _, cmd := range []string{"serve", "attach"} {
		out, _, _ := runBinary(t, binary, nil, cmd, "--help")
		for _, f := range []string{"--replacement-timeout", "--nop-interval", "--nop-timeout", "--queue-depth", "--command-timeout"} {
			if !strings.Contains(out, f) {
				t.Errorf("%s --help lacks %s", cmd, f)
			}
		}
	}
}

// TestCLIVolumeAddIscsiadmForms: volume add takes portals with their tag
// (one per --portal, the comma kept) and timeouts in seconds, and writes
// them as a file volume check accepts.
func TestCLIVolumeAddIscsiadmForms(t *testing.T) {
	dir := t.TempDir()
	env := []string{"ISER_ATTACH_CONFIG_DIR=" + dir}
	_, errs, code := runBinary(t, binary, env, "volume", "add", "v1", "--portal", "10.0.0.1:3260,1",
		"--portal", "[fe80::1%eth0]:3260,1", "--target", "iqn.2026-11.test:x", "--command-timeout", "45",
		"--replacement-timeout", "120", "--nop-interval", "0", "--login-timeout=20")
	if code != 0 {
		t.Fatalf("volume add: exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "v1.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"portal = 10.0.0.1:3260,1\n", "portal = [fe80::1%eth0]:3260,1\n",
		"command_timeout = 45s\n", "nop_interval = 0s\n", "login_timeout = 20s\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("v1.conf lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "replacement_timeout") { // 120 s is the default
		t.Errorf("v1.conf has the default replacement_timeout:\n%s", b)
	}
	if out, errs, code := runBinary(t, binary, env, "volume", "check", "v1"); code != 0 || out != "v1: ok\n" {
		t.Fatalf("volume check: exit %d\n%s%s", code, out, errs)
	}
	// volume list separates the portals with a space: a comma is a tag's.
	if out, errs, code := runBinary(t, binary, env, "volume", "list"); code != 0 ||
		!strings.Contains(out, " 10.0.0.1:3260,1 [fe80::1%eth0]:3260,1 ") {
		t.Fatalf("volume list: exit %d\n%s%s", code, out, errs)
	}
}
