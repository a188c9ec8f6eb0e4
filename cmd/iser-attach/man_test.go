package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/volume"
	"github.com/urfave/cli/v2"
)

// The manuals in man/ are written by hand; these tests keep them honest
// against the binary's commands and flags and volume/config.go's keys.

var (
	// otherFlags are other programs' flags the manual shows (systemctl enable --now).
	otherFlags = map[string]bool{"--now": true}
)

// manSections splits a roff page into its .SH and .SS sections by title
// (".SS volume add" and `.SS "volume add"` are both "volume add").
func manSections(t *testing.T, page string) (string, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "man", page))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	secs := map[string]string{}
	title := ""
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, ".SH ") || strings.HasPrefix(line, ".SS ") {
			title = strings.Trim(line[4:], `"`)
			if _, dup := secs[title]; dup {
				t.Errorf("%s: section %q twice", page, title)
			}
			secs[title] = ""
			continue
		}
		secs[title] += line + "\n"
	}
	return text, secs
}

// roffFlag is how a flag is written in roff: --log-level is \-\-log\-level.
func roffFlag(name string) string { return strings.ReplaceAll("--"+name, "-", `\-`) }

// visibleFlags are a command's flags as shown by --help, help aside.
func visibleFlags(flags []cli.Flag) []string {
	var out []string
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		if n := f.Names()[0]; n != "help" {
			out = append(out, n)
		}
	}
	return out
}

func TestManPageCommandsAndFlags(t *testing.T) {
	text, secs := manSections(t, "iser-attach.8")
	for _, s := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "GLOBAL OPTIONS", "COMMANDS", "EXIT STATUS",
		"FILES", "ENVIRONMENT", "EXAMPLES", "SEE ALSO"} {
		if _, ok := secs[s]; !ok {
			t.Errorf("iser-attach.8 lacks the section %s", s)
		}
	}
	app := newApp()
	defined := map[string]bool{"--help": true, "--version": true}
	for _, f := range visibleFlags(app.Flags) {
		defined["--"+f] = true
		if !strings.Contains(secs["GLOBAL OPTIONS"], roffFlag(f)) {
			t.Errorf("GLOBAL OPTIONS lacks %s", roffFlag(f))
		}
	}
	// A command's section, with the shared "... options" sections it names.
	shared := map[string]string{}
	for title, body := range secs {
		if strings.HasSuffix(title, " options") && title != "GLOBAL OPTIONS" {
			shared[strings.ToLower(title)] = body
		}
	}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			name := strings.TrimSpace(path + " " + c.Name)
			if len(c.Subcommands) > 0 {
				walk(name, c.Subcommands)
				continue
			}
			body, ok := secs[name]
			if !ok {
				t.Errorf("iser-attach.8 has no section for the command %q", name)
				continue
			}
			if !strings.Contains(secs["SYNOPSIS"], "\n.B iser\\-attach "+name+"\n") {
				t.Errorf("SYNOPSIS lacks %q", name)
			}
			all := body
			for title, sb := range shared {
				if strings.Contains(strings.ToLower(body), title) {
					all += sb
				}
			}
			for _, f := range visibleFlags(c.Flags) {
				defined["--"+f] = true
				if !strings.Contains(all, roffFlag(f)) {
					t.Errorf("section %q (with the option sections it names) lacks %s", name, roffFlag(f))
				}
			}
		}
	}
	walk("", app.Commands)
	// No flag the binary does not have (a removed or renamed one).
	for _, m := range regexp.MustCompile(`\\-\\-[a-z]+(\\-[a-z0-9]+)*`).FindAllString(text, -1) {
		f := strings.ReplaceAll(m, `\-`, "-")
		if !defined[f] && !otherFlags[f] {
			t.Errorf("iser-attach.8 names %s, which no command has", f)
		}
	}
}

func TestManPageConfigKeys(t *testing.T) {
	text, secs := manSections(t, "iser-attach.conf.5")
	keys := secs["KEYS"]
	// A key's paragraph: from ".B key" after .TP to the next .TP.
	paras := map[string]string{}
	for _, p := range strings.Split(keys, ".TP\n")[1:] {
		first, rest, _ := strings.Cut(p, "\n")
		paras[strings.TrimPrefix(first, ".B ")] = rest
	}
	known := map[string]bool{}
	def := volume.DefaultConfig("x")
	defaults := map[string]string{
		"transport": def.Transport, "frontend": def.Frontend, "queue_depth": fmt.Sprint(def.QueueDepth),
		"replacement_timeout": seconds(def.ReplacementTimeout), "nop_interval": seconds(def.NOPInterval),
		"nop_timeout": seconds(def.NOPTimeout), "login_timeout": seconds(def.LoginTimeout),
		"command_timeout": seconds(def.CommandTimeout), "queues": fmt.Sprint(def.Queues),
		"nbd_connections": fmt.Sprint(def.NBDConnections), "path_selector": strings.ReplaceAll(def.PathSelector, "-", `\-`),
	}
	for _, k := range volume.ConfigKeys() {
		known[k] = true
		p, ok := paras[k]
		if !ok {
			t.Errorf("iser-attach.conf.5 KEYS lacks %s", k)
			continue
		}
		if d, ok := defaults[k]; ok && !strings.Contains(p, "Default: "+d+".") {
			t.Errorf("iser-attach.conf.5: %s does not say 'Default: %s.'", k, d)
		}
	}
	for k := range defaults {
		if !known[k] {
			t.Errorf("the test's default of %s is for a key volume/config.go does not have", k)
		}
	}
	for k := range paras {
		if !known[k] {
			t.Errorf("iser-attach.conf.5 describes %s, which volume/config.go does not accept", k)
		}
	}
	if !strings.Contains(text, "Repeat the key") {
		t.Error("iser-attach.conf.5 does not say portal repeats")
	}
}

func seconds(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }

// Both pages render without a warning from groff (-ww: all of them) or man.
func TestManPagesRender(t *testing.T) {
	need(t, "groff", "man")
	for _, page := range []string{"iser-attach.8", "iser-attach.conf.5"} {
		path, _ := filepath.Abs(filepath.Join("..", "..", "man", page))
		out, err := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", path).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("groff %s: %v\n%s", page, err, out)
		}
		cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", path)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil || stderr.Len() > 0 || !strings.Contains(string(b), "NAME") {
			t.Errorf("man -l %s: %v\n%s\n%.500s", page, err, stderr.String(), b)
		}
	}
}
