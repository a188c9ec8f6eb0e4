package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/volume"
)

// volumeEnv points the configuration and run directories at temporary ones.
func volumeEnv(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "volumes")
	t.Setenv(volume.ConfigDirEnv, dir)
	old := volume.RunDir
	volume.RunDir = t.TempDir()
	t.Cleanup(func() { volume.RunDir = old })
	return dir
}

// runVolume runs `iser-attach volume ARGS...` in process.
func runVolume(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	app := &cli.App{
		Name:           "iser-attach",
		Commands:       []*cli.Command{volumeCommand()},
		Writer:         &out,
		ErrWriter:      &errb,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := runApp(app, append([]string{"iser-attach", "volume"}, args...))
	return out.String(), errb.String(), err
}

const volTarget = "iqn.2026-01.com.example:disk"

func TestVolumeAddListCheckRemove(t *testing.T) {
	dir := volumeEnv(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Flags after NAME, as the usage line shows them.
	out, errs, err := runVolume(t, "add", "db", "--portal", "10.0.0.1", "--portal", "[fd00::2]:3261",
		"--target", volTarget, "--lun", "3", "--transport", "iser", "--chap-user", "alice",
		"--chap-secret-file", secret, "--replacement-timeout", "0s", "--command-timeout", "45s")
	if err != nil {
		t.Fatalf("add: %v\n%s", err, errs)
	}
	path := filepath.Join(dir, "db.conf")
	if strings.TrimSpace(out) != path {
		t.Fatalf("add printed %q, want %q", out, path)
	}
	cfg, err := volume.LoadConfig("db")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LUN != 3 || cfg.Transport != "iser" || len(cfg.Portals) != 2 || cfg.CHAPSecretFile != secret ||
		cfg.ReplacementTimeout != 0 || cfg.QueueDepth != volume.DefaultQueueDepth || cfg.CommandTimeout != 45*time.Second {
		t.Fatalf("written config: %+v", cfg)
	}
	out, _, err = runVolume(t, "add", "other", "--help")
	if err != nil || !strings.Contains(out, "--replacement-timeout") {
		t.Fatalf("add NAME --help: %v\n%s", err, out)
	}
	if _, err := volume.LoadConfig("other"); err == nil {
		t.Fatal("add NAME --help wrote a file")
	}
	// Flags before NAME work too.
	if _, errs, err := runVolume(t, "add", "--portal", "h", "--target", volTarget, "--frontend", "nbd", "web"); err != nil {
		t.Fatalf("add web: %v\n%s", err, errs)
	}
	if _, _, err := runVolume(t, "add", "db", "--portal", "h", "--target", volTarget); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("add over an existing file: %v", err)
	}
	if _, errs, err := runVolume(t, "add", "db", "--portal", "h", "--target", volTarget, "--force"); err != nil {
		t.Fatalf("add --force: %v\n%s", err, errs)
	}
	if _, errs, err := runVolume(t, "add", "db", "--portal", "10.0.0.1", "--target", volTarget, "--lun", "3",
		"--chap-user", "alice", "--chap-secret-file", secret, "--force"); err != nil {
		t.Fatalf("add --force: %v\n%s", err, errs)
	}

	out, errs, err = runVolume(t, "list")
	if err != nil {
		t.Fatalf("list: %v\n%s", err, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "db ") || !strings.HasPrefix(lines[2], "web ") {
		t.Fatalf("list:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || f[1] != volTarget || f[2] != "3" || f[3] != "10.0.0.1" || f[6] != "-" {
		t.Fatalf("db row: %q", lines[1])
	}

	out, errs, err = runVolume(t, "check")
	if err != nil || out != "db: ok\nweb: ok\n" || errs != "" {
		t.Fatalf("check: %v\n%s%s", err, out, errs)
	}
	// A secret file must be private (0600 or stricter) and exist; the
	// problem is reported on the line of its key. db.conf: two comment
	// lines, portal, target, lun, transport, frontend, chap_user,
	// chap_secret_file.
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(secret, mode); err != nil {
			t.Fatal(err)
		}
		out, errs, err = runVolume(t, "check", "db")
		if want := fmt.Sprintf("%s:9: chap_secret_file: %s is not private (mode %04o; chmod 600 %s)\n", path, secret, mode, secret); err == nil || out != want {
			t.Fatalf("check with a secret of mode %o: %v\n%s%s\nwant %s", mode, err, out, errs, want)
		}
	}
	if err := os.Chmod(secret, 0o400); err != nil {
		t.Fatal(err)
	}
	if out, errs, err = runVolume(t, "check", "db"); err != nil || out != "db: ok\n" {
		t.Fatalf("check with a secret of mode 0400: %v\n%s%s", err, out, errs)
	}
	if err := os.Remove(secret); err != nil {
		t.Fatal(err)
	}
	out, _, err = runVolume(t, "check", "db", "web")
	if err == nil || !strings.HasPrefix(out, path+":9: chap_secret_file: stat "+secret+": no such file") || !strings.HasSuffix(out, "web: ok\n") {
		t.Fatalf("check with a missing secret: %v\n%s", err, out)
	}

	out, errs, err = runVolume(t, "remove", "web")
	if err != nil || !strings.Contains(out, "web.conf") {
		t.Fatalf("remove: %v\n%s%s", err, out, errs)
	}
	if _, _, err := runVolume(t, "remove", "web"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("second remove: %v", err)
	}
	if _, _, err := runVolume(t, "check", "web"); err == nil {
		t.Fatal("check of a removed volume passed")
	}
}

func TestVolumeAddErrors(t *testing.T) {
	volumeEnv(t)
	dir := t.TempDir()
	open, empty, missing := filepath.Join(dir, "open"), filepath.Join(dir, "empty"), filepath.Join(dir, "missing")
	private := filepath.Join(dir, "private")
	for f, mode := range map[string]os.FileMode{open: 0o640, private: 0o600} {
		if err := os.WriteFile(f, []byte("s3cret-s3cret\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	chap := func(secret, mutual string) []string {
		args := []string{"add", "x", "--portal", "h", "--target", volTarget, "--chap-user", "u", "--chap-secret-file", secret}
		if mutual != "" {
			args = append(args, "--mutual-user", "m", "--mutual-secret-file", mutual)
		}
		return args
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "x", "--target", volTarget}, "--portal: no portal"},
		{[]string{"add", "x", "--portal", "h"}, "--target"},
		{[]string{"add", "x", "--portal", "h:0", "--target", volTarget}, "--portal: "},
		{[]string{"add", "x", "--portal", "h", "--target", "disk"}, "--target: "},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--lun", "20000"}, "--lun 20000"},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--transport", "rdma"}, "--transport: "},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--queue-depth", "0"}, "--queue-depth: "},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--nop-timeout", "0s"}, "--nop-timeout: "},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--command-timeout", "0s"}, "--command-timeout: "},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--chap-user", "u"}, "--chap-user: "},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--chap-user", "u", "--chap-secret-file", "rel"}, "--chap-secret-file: "},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--chap-user", " u", "--chap-secret-file", "/s"}, "survive"},
		{[]string{"add", "x", "--portal", "h", "--target", volTarget, "--bogus"}, "bogus"},
		{[]string{"add", "../x", "--portal", "h", "--target", volTarget}, "volume name"},
		{[]string{"add"}, "expected one NAME"},
		{[]string{"add", "x", "y", "--portal", "h", "--target", volTarget}, "expected one NAME"},
		// What volume check checks of the secret files, every problem.
		{chap(missing, ""), "--chap-secret-file: stat " + missing + ": no such file"},
		{chap(open, ""), "--chap-secret-file: " + open + " is not private (mode 0640; chmod 600 " + open + ")"},
		{chap(empty, ""), "--chap-secret-file: " + empty + " is empty"},
		{chap(dir, ""), "--chap-secret-file: " + dir + " is not a regular file"},
		{chap(private, open), "volume add x: --mutual-secret-file: " + open + " is not private"},
		{chap(missing, open), "--chap-secret-file: stat " + missing + ": no such file or directory; --mutual-secret-file: " + open + " is not private"},
	} {
		_, _, err := runVolume(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want ~%q", tt.args, err, tt.want)
		}
	}
	if ents, _ := os.ReadDir(os.Getenv(volume.ConfigDirEnv)); len(ents) != 0 {
		t.Fatalf("files written by failed adds: %v", ents)
	}
}

func TestVolumeListInvalid(t *testing.T) {
	dir := volumeEnv(t)
	if out, _, err := runVolume(t, "list", "--json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty list --json: %v %q", err, out)
	}
	if _, errs, err := runVolume(t, "add", "good", "--portal", "h", "--target", volTarget); err != nil {
		t.Fatalf("add: %v\n%s", err, errs)
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("portal = h\ntarget = "+volTarget+"\nlun = many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runVolume(t, "list")
	if err == nil {
		t.Fatal("list with a bad file succeeded")
	}
	if !strings.Contains(out, "bad ") || !strings.Contains(out, "invalid: "+bad+":3: lun: ") || !strings.Contains(out, "good ") {
		t.Fatalf("list:\n%s", out)
	}
	out, _, err = runVolume(t, "list", "--json")
	if err == nil {
		t.Fatal("list --json with a bad file succeeded")
	}
	var rows []volumeRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0].Name != "bad" || rows[0].State != "invalid" || rows[0].Error == "" ||
		rows[1].Name != "good" || rows[1].State != "detached" || rows[1].LUN != nil { // added without --lun
		t.Fatalf("rows: %+v", rows)
	}
	out, _, err = runVolume(t, "check")
	if err == nil || out != bad+":3: lun: \"many\": want a LUN from 0 to 16383\ngood: ok\n" {
		t.Fatalf("check: %v\n%s", err, out)
	}
}

type fakeAttached struct{ st volume.Status }

func (f *fakeAttached) Status() volume.Status              { return f.st }
func (f *fakeAttached) Detach(context.Context, bool) error { return nil }

func TestVolumeAttached(t *testing.T) {
	volumeEnv(t)
	if _, errs, err := runVolume(t, "add", "db", "--portal", "h", "--target", volTarget); err != nil {
		t.Fatalf("add: %v\n%s", err, errs)
	}
	srv, err := volume.ListenControl("db", &fakeAttached{volume.Status{Name: "db", Device: "/dev/ublkb7", PID: 42}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	out, errs, err := runVolume(t, "list")
	if err != nil || !strings.Contains(out, "attached /dev/ublkb7") {
		t.Fatalf("list: %v\n%s%s", err, out, errs)
	}
	out, _, err = runVolume(t, "list", "--json")
	if err != nil || !strings.Contains(out, `"state": "attached"`) || !strings.Contains(out, `"device": "/dev/ublkb7"`) {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if _, _, err := runVolume(t, "remove", "db"); err == nil || !strings.Contains(err.Error(), "attached as /dev/ublkb7") {
		t.Fatalf("remove while attached: %v", err)
	}
	if _, err := volume.LoadConfig("db"); err != nil {
		t.Fatalf("refused remove deleted the file: %v", err)
	}
	_, errs, err = runVolume(t, "remove", "db", "--force")
	if err != nil || !strings.Contains(errs, "stays attached") {
		t.Fatalf("remove --force: %v\n%s", err, errs)
	}
	if _, err := volume.LoadConfig("db"); err == nil {
		t.Fatal("file still there after remove --force")
	}
}
