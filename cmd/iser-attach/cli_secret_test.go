package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iser-attach/iser-attach/internal/tgttest"
	"github.com/iser-attach/iser-attach/volume"
)

// TestCLISecretFilePermissions checks that every command reading a secret
// file warns about one readable by others and goes on, that volume check
// fails for one that is not private (0600 or stricter), and that a secret
// never shows.
func TestCLISecretFilePermissions(t *testing.T) {
	srv := tgttest.Start(t, tgttest.Target{IQN: "iqn.2026-11.test:chap", CHAP: &tgttest.CHAP{User: "u1", Secret: "goodsecret123"},
		Mutual: &tgttest.CHAP{User: "tgt1", Secret: "targetsecret9"}})
	dir := t.TempDir()
	secret, mutual := filepath.Join(dir, "secret"), filepath.Join(dir, "mutual")
	for f, s := range map[string]string{secret: "goodsecret123\n", mutual: "targetsecret9\n"} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{volume.ConfigDirEnv + "=" + filepath.Join(dir, "volumes")}
	if _, errs, err := run(t, env, "volume", "add", "db", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:chap",
		"--chap-user", "u1", "--chap-secret-file", secret, "--mutual-user", "tgt1", "--mutual-secret-file", mutual); err != nil {
		t.Fatalf("volume add: %v\n%s", err, errs)
	}
	auth := []string{"--chap-user", "u1", "--chap-secret-file", secret, "--mutual-user", "tgt1", "--mutual-secret-file", mutual}
	commands := map[string][]string{
		"info":     append([]string{"info", "--portal", srv.Portal(), "--target", "iqn.2026-11.test:chap", "--lun", "1"}, auth...),
		"discover": append(append([]string{"discover"}, auth...), srv.Portal()),
	}
	warned := func(errs, path string) bool {
		return strings.Contains(errs, " "+path+" is world-readable (chmod o-r "+path+")\n")
	}
	check := func(mode os.FileMode) {
		t.Helper()
		for _, f := range []string{secret, mutual} {
			if err := os.Chmod(f, mode); err != nil {
				t.Fatal(err)
			}
		}
		want := mode&0o004 != 0
		// volume check (and volume add) want private files: 0600 or stricter.
		out, errs, err := run(t, env, "volume", "check", "db")
		if private := mode&0o077 == 0; private != (err == nil) || private != (out == "db: ok\n") ||
			!private && (!strings.Contains(out, ": chap_secret_file: "+secret+" is not private") ||
				!strings.Contains(out, ": mutual_secret_file: "+mutual+" is not private")) {
			t.Fatalf("volume check, mode %o: %v\n%s%s", mode, err, out, errs)
		}
		for name, args := range commands {
			_, errs, err := run(t, env, args...)
			if name == "info" && err != nil {
				t.Fatalf("info, mode %o: %v\n%s", mode, err, errs)
			}
			if warned(errs, secret) != want || warned(errs, mutual) != want {
				t.Fatalf("%s, mode %o: warnings:\n%s", name, mode, errs)
			}
			if want && (!strings.Contains(errs, "warning: CHAP secret file "+secret) ||
				!strings.Contains(errs, "warning: mutual CHAP secret file "+mutual)) {
				t.Fatalf("%s, mode %o: warnings\n%s", name, mode, errs)
			}
			if strings.Contains(errs, "goodsecret123") || strings.Contains(errs, "targetsecret9") {
				t.Fatalf("%s: a secret was printed", name)
			}
		}
	}
	check(0o600)
	check(0o640)
	check(0o644)
}

// TestCLISameSecretBothWays checks that one secret for both directions is
// refused in one line before any connection is made.
func TestCLISameSecretBothWays(t *testing.T) {
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte("samesecret123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"info", "--portal", "127.0.0.1:1", "--target", "iqn.x:y", "--chap-user", "u", "--chap-secret-file", f,
			"--mutual-user", "t", "--mutual-secret-file", f},
		{"discover", "--chap-user", "u", "--mutual-user", "t", "127.0.0.1:1"},
	} {
		env := []string{"ISER_ATTACH_CHAP_SECRET=samesecret123", "ISER_ATTACH_MUTUAL_SECRET=samesecret123"}
		_, errs, err := run(t, env, args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if err == nil || len(lines) != 1 || !strings.Contains(lines[0], "same as the CHAP secret") {
			t.Fatalf("%s: %v\n%s", args[0], err, errs)
		}
	}
}
