package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// bashComplete sources the generated script in bash and returns what it
// completes for the words typed (the last one being completed).
func bashComplete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + w + "'"
	}
	prog := ". " + script + "\nCOMP_WORDS=(iser-attach " + strings.Join(quoted, " ") + ")\n" +
		"COMP_CWORD=" + strconv.Itoa(len(words)) + "\n_iser_attach\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	out, err := exec.Command("bash", "--norc", "-c", prog).CombinedOutput()
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
