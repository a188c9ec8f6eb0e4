package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// bashComplete sources the generated script in bash and returns what it
// completes for the words typed (the last one being completed).
func bashComplete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	return bashCompleteEnv(t, script, nil, words...)
}

// bashCompleteEnv is bashComplete with env added to the environment.
func bashCompleteEnv(t *testing.T, script string, env []string, words ...string) []string {
	t.Helper()
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + w + "'"
	}
	prog := ". " + script + "\nCOMP_WORDS=(iser-attach " + strings.Join(quoted, " ") + ")\n" +
		"COMP_CWORD=" + strconv.Itoa(len(words)) + "\n_iser_attach\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	cmd := exec.Command("bash", "--norc", "-c", prog)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func TestGenCompletionBash(t *testing.T) {
	out, errs, code := runBinary(t, binary, nil, "gen-completion", "bash")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	script := filepath.Join(t.TempDir(), "iser-attach.bash")
	if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string // space-separated, in definition order
	}{
		{[]string{"se"}, "serve"},
		{[]string{"v"}, "volume version"},
		{[]string{"--log-l"}, "--log-level"},
		{[]string{"volume", "a"}, "add"},
		{[]string{"volume", "add", "db", "--por"}, "--portal"},
		{[]string{"--log-level", "debug", "serve", "--lis"}, "--listen"},
		{[]string{"rdma", "setup", "--n"}, "--netdev --name"},
		{[]string{"detach", "--f"}, "--force"},
		{[]string{"gen-"}, ""}, // hidden
	} {
		if got := strings.Join(bashComplete(t, script, tc.words...), " "); got != tc.want {
			t.Errorf("%q: completed %q, want %q", tc.words, got, tc.want)
		}
	}
	for _, c := range newApp().Commands {
		if c.Hidden {
			continue
		}
		if got := bashComplete(t, script, c.Name); len(got) == 0 || got[0] != c.Name {
			t.Errorf("command %s: completed %q", c.Name, got)
		}
	}
}

func TestGenCompletionZsh(t *testing.T) {
	need(t, "zsh")
	out, errs, code := runBinary(t, binary, nil, "gen-completion", "zsh")
	if code != 0 || !strings.HasPrefix(out, "#compdef iser-attach\n") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	script := filepath.Join(t.TempDir(), "_iser-attach")
	if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("zsh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, b)
	}
	// Every visible command and flag is offered with its usage.
	for _, want := range []string{"'serve:log in and serve", "'--listen:unix\\:PATH or tcp\\:HOST\\:PORT (repeatable)",
		"'volume/add') opts=(", "'--netdev:network interface"} {
		if !strings.Contains(out, want) {
			t.Errorf("zsh script lacks %q", want)
		}
	}
	if strings.Contains(out, "gen-man") {
		t.Error("zsh script offers the hidden gen-man")
	}
}

// volumesDir is a volume directory with volumes db and web, and files that
// are not volumes.
func volumesDir(t *testing.T) string {
	dir := t.TempDir()
	for _, f := range []string{"db.conf", "web.conf", ".hidden.conf", "notes.txt", "web.conf~"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("portal = 192.0.2.1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Flag values and volume names are completed; without volumes a command
// taking a name offers its flags.
func TestGenCompletionBashValues(t *testing.T) {
	out, errs, code := runBinary(t, binary, nil, "gen-completion", "bash")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	script := filepath.Join(t.TempDir(), "iser-attach.bash")
	if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	vols := []string{"ISER_ATTACH_CONFIG_DIR=" + volumesDir(t)}
	none := []string{"ISER_ATTACH_CONFIG_DIR=" + t.TempDir()}
	for _, tc := range []struct {
		env   []string
		words []string
		want  string // FLAGS: attach's flags, no volume
	}{
		{vols, []string{"attach", ""}, "db web"},
		{vols, []string{"attach", "w"}, "web"},
		{vols, []string{"attach", "--"}, "FLAGS"},
		{vols, []string{"attach", "db", ""}, "FLAGS"}, // one name only
		{vols, []string{"attach", "--volume", ""}, "db web"},
		{vols, []string{"attach", "--transport", "tcp", ""}, "db web"},
		{vols, []string{"detach", "d"}, "db"},
		{vols, []string{"stats", ""}, "db web"},
		{vols, []string{"--log-level", "debug", "stats", ""}, "db web"},
		{vols, []string{"volume", "remove", ""}, "db web"},
		{vols, []string{"volume", "check", "db", ""}, "db web"},
		{vols, []string{"volume", ""}, "add remove list check help --help"},
		{vols, []string{"attach", "--transport", ""}, "auto iser tcp"},
		{vols, []string{"serve", "--transport", "i"}, "iser"},
		{vols, []string{"attach", "--transport", "=", ""}, "auto iser tcp"},
		{vols, []string{"attach", "--transport", "=", "t"}, "tcp"},
		{vols, []string{"attach", "--frontend", ""}, "ublk nbd"},
		{vols, []string{"volume", "add", "x", "--frontend", "n"}, "nbd"},
		{vols, []string{"--log-format", ""}, "console json"},
		{vols, []string{"info", "--log-level", "w"}, "warn"},
		{none, []string{"detach", ""}, "--force --help"},
	} {
		got := strings.Join(bashCompleteEnv(t, script, tc.env, tc.words...), " ")
		if tc.want == "FLAGS" {
			if !strings.Contains(got, "--portal") || strings.Contains(got, "db") {
				t.Errorf("%q: completed %q, want the flags", tc.words, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%q: completed %q, want %q", tc.words, got, tc.want)
		}
	}
}

// The zsh script parses, and run with zsh's completion builtins stubbed
// it offers the flag values and volume names.
func TestGenCompletionZshValues(t *testing.T) {
	need(t, "zsh")
	out, errs, code := runBinary(t, binary, nil, "gen-completion", "zsh")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	script := filepath.Join(t.TempDir(), "_iser-attach")
	if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := volumesDir(t)
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"attach", ""}, "compadd db web"},
		{[]string{"detach", ""}, "compadd db web"},
		{[]string{"volume", "check", "db", ""}, "compadd db web"},
		{[]string{"attach", "db", ""}, "_describe"},
		{[]string{"attach", "--volume", ""}, "compadd db web"},
		{[]string{"attach", "--transport", ""}, "compadd -- auto iser tcp"},
		{[]string{"attach", "--frontend", ""}, "compadd -- ublk nbd"},
		{[]string{"--log-level", ""}, "compadd -- trace debug info warn error"},
		{[]string{"serve", "--listen", ""}, "_files"},
		{[]string{"info", ""}, "_describe"},
	} {
		quoted := make([]string, len(tc.words))
		for i, w := range tc.words {
			quoted[i] = "'" + w + "'"
		}
		// compadd -a NAME prints the array's elements.
		prog := fmt.Sprintf(`compadd() { if [[ $1 == -a ]]; then print -r -- compadd ${(P)2}; else print -r -- compadd "$@"; fi }
_describe() { print -r -- _describe; }
_files() { print -r -- _files; }
words=(iser-attach %s)
CURRENT=%d
source %s
`, strings.Join(quoted, " "), len(tc.words)+1, script)
		cmd := exec.Command("zsh", "-f", "-c", prog)
		cmd.Env = append(os.Environ(), "ISER_ATTACH_CONFIG_DIR="+dir)
		b, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(b)); err != nil || got != tc.want {
			t.Errorf("%q: %v: got %q, want %q", tc.words, err, got, tc.want)
		}
	}
}

// Every value completed is one the flag's usage names, for every command
// with that flag; the log flags' values are accepted by the binary; the
// commands taking volume names exist.
func TestGenCompletionValues(t *testing.T) {
	app := newApp()
	seen := map[string]bool{}
	var walk func(path string, cmds []*cli.Command, flags []cli.Flag)
	walk = func(path string, cmds []*cli.Command, flags []cli.Flag) {
		seen[path] = true
		for _, f := range flags {
			vals, ok := flagValues["--"+f.Names()[0]]
			if !ok {
				continue
			}
			seen["--"+f.Names()[0]] = true
			usage := f.(cli.DocGenerationFlag).GetUsage()
			for _, v := range vals {
				if !regexp.MustCompile(`\b` + v + `\b`).MatchString(usage) {
					t.Errorf("%s --%s: usage %q does not name %q", path, f.Names()[0], usage, v)
				}
			}
		}
		for _, c := range cmds {
			p := c.Name
			if path != "" {
				p = path + "/" + c.Name
			}
			walk(p, c.Subcommands, c.Flags)
		}
	}
	walk("", app.Commands, app.Flags)
	for f := range flagValues {
		if !seen[f] {
			t.Errorf("flagValues has %s, which no command has", f)
		}
	}
	for p := range volumeArgs {
		if !seen[p] {
			t.Errorf("volumeArgs has %s, which is no command", p)
		}
	}
	for _, flag := range []string{"--log-level", "--log-format"} {
		for _, v := range flagValues[flag] {
			if _, errs, code := runBinary(t, binary, nil, flag, v, "version"); code != 0 {
				t.Errorf("%s %s version: exit %d: %s", flag, v, code, errs)
			}
		}
	}
}
