package main

// args.go: the command line before urfave/cli sees it. normalizeArgs puts
// every flag before the positional arguments of its command (urfave/cli v2
// stops parsing flags at the first argument), moves global and parent flags
// given after a command back to their command, turns "help [COMMAND...]"
// into "COMMAND... --help", and reports as usage errors the mistakes
// urfave/cli answers with a page of help or not at all: unknown commands and
// flags, missing flag values, missing required flags, argument counts.
// It reads durations itself (a plain number is seconds, as iscsiadm's
// timeouts are) and hands them on as Go durations. Other flag values
// (--lun abc) are parsed by urfave/cli; its OnUsageError (onUsageError)
// makes them the same one-line usage error.

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/volume"
)

// usageError is a mistake on the command line: one line naming it and the
// help to read, exit status 2 (runtime failures exit 1).
type usageError struct {
	cmd string // command path after the program name ("volume add"), "" for the program
	msg string
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return fmt.Sprintf("%s (see '%s help')", e.msg, appName)
	}
	return fmt.Sprintf("%s: %s (see '%s help %s')", e.cmd, e.msg, appName, e.cmd)
}

// ExitCode is 2 for usage mistakes; main exits with it.
func (e *usageError) ExitCode() int { return 2 }

// usageErrorf returns a usage error of the command c (nil: the program).
func usageErrorf(c *cli.Context, format string, args ...any) error {
	return &usageError{cmd: commandPath(c), msg: fmt.Sprintf(format, args...)}
}

// commandPath is c's command path after the program name ("volume add").
func commandPath(c *cli.Context) string {
	if c == nil || c.Command == nil {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(c.Command.HelpName, c.App.HelpName))
}

// onUsageError is every command's OnUsageError: a flag urfave/cli could not
// parse (a bad value) becomes a usageError.
func onUsageError(c *cli.Context, err error, _ bool) error {
	return usageErrorf(c, "%s", err)
}

// setUsageErrorHandlers installs onUsageError on cmds and their subcommands.
func setUsageErrorHandlers(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		setUsageErrorHandlers(c.Subcommands)
	}
}

// argLevel is the program or one command on the command line, with the
// flag arguments given to it.
type argLevel struct {
	cmd   *cli.Command // nil for the program
	word  string       // the command's name as typed
	path  string       // "volume add"
	flags []cli.Flag   // the flags it accepts, help (and at the top version) included
	given []string     // its flag arguments, values included, in order
	set   map[string]bool
}

func (l *argLevel) errorf(format string, args ...any) error {
	return &usageError{cmd: l.path, msg: fmt.Sprintf(format, args...)}
}

func (l *argLevel) subcommands(app *cli.App) []*cli.Command {
	if l.cmd == nil {
		return app.Commands
	}
	return l.cmd.Subcommands
}

func newArgLevel(cmd *cli.Command, word, parent string, flags []cli.Flag) *argLevel {
	path := ""
	if cmd != nil {
		path = strings.TrimSpace(parent + " " + cmd.Name)
	}
	if cli.HelpFlag != nil && (cmd == nil || !cmd.HideHelp) {
		flags = append(flags[:len(flags):len(flags)], cli.HelpFlag)
	}
	return &argLevel{cmd: cmd, word: word, path: path, flags: flags, set: map[string]bool{}}
}

// runApp runs app with args (os.Args) normalized by normalizeArgs.
func runApp(app *cli.App, args []string) error {
	args, err := normalizeArgs(app, args)
	if err != nil {
		return err
	}
	return app.Run(args)
}

// normalizeArgs checks args (os.Args) against app's commands and flags and
// returns them in the order urfave/cli parses: each command's flags right
// after its name, then "--" when an argument looks like a flag, then the
// arguments.
func normalizeArgs(app *cli.App, args []string) ([]string, error) {
	if len(args) == 0 {
		return args, nil
	}
	rootFlags := app.Flags
	if app.Version != "" && !app.HideVersion && cli.VersionFlag != nil {
		rootFlags = append(rootFlags[:len(rootFlags):len(rootFlags)], cli.VersionFlag)
	}
	levels := []*argLevel{newArgLevel(nil, "", "", rootFlags)}
	var positional []string
	help := false
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		cur := levels[len(levels)-1]
		if a == "--" {
			positional = append(positional, rest[i+1:]...)
			break
		}
		if len(a) > 1 && a[0] == '-' {
			name, hasValue := flagName(a)
			lv, f := lookupFlag(levels, name)
			if f == nil {
				hint := didYouMean("--", name, flagNames(levels))
				if hint == "" {
					hint = flagElsewhere(app.Commands, "", name)
				}
				return nil, cur.errorf("flag provided but not defined: -%s%s", name, hint)
			}
			tok := []string{a}
			if takesValue(f) && !hasValue {
				if i+1 >= len(rest) {
					return nil, cur.errorf("flag needs an argument: -%s", name)
				}
				i++
				tok = append(tok, rest[i])
			}
			if _, ok := f.(*cli.DurationFlag); ok {
				var err error
				if tok, err = durationArg(tok); err != nil {
					return nil, lv.errorf("--%s: %v", name, err)
				}
			}
			lv.given = append(lv.given, tok...)
			lv.set[f.Names()[0]] = true
			continue
		}
		if subs := cur.subcommands(app); len(subs) > 0 && len(positional) == 0 {
			if (a == "help" || a == "h") && !help {
				help = true
				continue
			}
			c := findCommand(subs, a)
			if c == nil {
				return nil, cur.errorf("unknown command %q%s", a, didYouMean("", a, commandNames(subs)))
			}
			levels = append(levels, newArgLevel(c, a, cur.path, c.Flags))
			continue
		}
		positional = append(positional, a)
	}
	leaf := levels[len(levels)-1]
	helpFlag, versionFlag := false, false
	for _, lv := range levels {
		helpFlag = helpFlag || lv.set["help"]
		versionFlag = versionFlag || lv.set["version"]
	}
	if !help && !helpFlag && !versionFlag {
		if err := checkRequired(levels); err != nil {
			return nil, err
		}
		if leaf.cmd != nil && len(leaf.cmd.Subcommands) == 0 {
			if err := checkArgCount(leaf, positional); err != nil {
				return nil, err
			}
		}
	}
	out := []string{args[0]}
	for _, lv := range levels {
		if lv.cmd != nil {
			out = append(out, lv.word)
		}
		out = append(out, lv.given...)
	}
	if help {
		if len(positional) > 0 {
			return nil, leaf.errorf("%q is not a command", positional[0])
		}
		return append(out, "--help"), nil
	}
	if helpFlag {
		return out, nil // the help of the command, whatever its arguments
	}
	for _, p := range positional {
		if len(p) > 1 && p[0] == '-' {
			out = append(out, "--")
			break
		}
	}
	return append(out, positional...), nil
}

// durationArg reads a duration flag's value (tok: "--name=value" or
// "--name", "value") as volume.ParseDuration does, a plain number being
// seconds, and returns it as a Go duration urfave/cli parses.
func durationArg(tok []string) ([]string, error) {
	value := ""
	if len(tok) == 2 {
		value = tok[1]
	} else {
		_, value, _ = strings.Cut(tok[0], "=")
	}
	d, err := volume.ParseDuration(value)
	if err != nil {
		return nil, err
	}
	if len(tok) == 2 {
		return []string{tok[0], d.String()}, nil
	}
	name, _, _ := strings.Cut(tok[0], "=")
	return []string{name + "=" + d.String()}, nil
}

// flagName is the name in "-name", "--name" or "--name=value", and whether
// the value came with it.
func flagName(arg string) (string, bool) {
	name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		return name[:i], true
	}
	return name, false
}

// didYouMean is "; did you mean PREFIXNAME?" for the name among names
// nearest to typed (suggestDistance), or "" when none is near.
func didYouMean(prefix, typed string, names []string) string {
	limit := 2
	if len(typed) <= 4 {
		limit = 1
	}
	best, bestD := "", limit+1
	for _, n := range names {
		if d := suggestDistance(typed, n); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %s%s?", prefix, best)
}

// suggestDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of neighbours count 1.
func suggestDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// flagElsewhere is "; COMMAND... takes it" for a flag this command lacks
// but others have (info --replacement-timeout: serve and attach), or "".
func flagElsewhere(cmds []*cli.Command, parent, name string) string {
	var have []string
	var walk func(cmds []*cli.Command, parent string)
	walk = func(cmds []*cli.Command, parent string) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			path := strings.TrimSpace(parent + " " + c.Name)
			for _, f := range c.Flags {
				if slices.Contains(f.Names(), name) {
					have = append(have, path)
					break
				}
			}
			walk(c.Subcommands, path)
		}
	}
	walk(cmds, parent)
	switch {
	case len(have) == 0:
		return ""
	case len(have) > 3:
		return fmt.Sprintf("; %s, %s and others take it", have[0], have[1])
	case len(have) == 1:
		return fmt.Sprintf("; %s takes it", have[0])
	}
	return fmt.Sprintf("; %s and %s take it", strings.Join(have[:len(have)-1], ", "), have[len(have)-1])
}

// commandNames are the names and aliases of the visible commands of cmds.
func commandNames(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if !c.Hidden {
			out = append(out, c.Names()...)
		}
	}
	return out
}

// flagNames are the names of the flags every level accepts.
func flagNames(levels []*argLevel) []string {
	var out []string
	for _, lv := range levels {
		for _, f := range lv.flags {
			if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
				continue
			}
			out = append(out, f.Names()...)
		}
	}
	return out
}

// lookupFlag finds the flag name in the innermost level that has it.
func lookupFlag(levels []*argLevel, name string) (*argLevel, cli.Flag) {
	for i := len(levels) - 1; i >= 0; i-- {
		for _, f := range levels[i].flags {
			for _, n := range f.Names() {
				if n == name {
					return levels[i], f
				}
			}
		}
	}
	return nil, nil
}

func takesValue(f cli.Flag) bool {
	if d, ok := f.(cli.DocGenerationFlag); ok {
		return d.TakesValue()
	}
	return true
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// checkRequired reports the first required flag that is neither given nor
// set through its environment variable.
func checkRequired(levels []*argLevel) error {
	for _, lv := range levels {
		for _, f := range lv.flags {
			r, ok := f.(cli.RequiredFlag)
			if !ok || !r.IsRequired() || lv.set[f.Names()[0]] {
				continue
			}
			if d, ok := f.(cli.DocGenerationFlag); ok && envSet(d.GetEnvVars()) {
				continue
			}
			return lv.errorf("required flag --%s not given", f.Names()[0])
		}
	}
	return nil
}

func envSet(names []string) bool {
	for _, n := range names {
		if _, ok := os.LookupEnv(n); ok {
			return true
		}
	}
	return false
}

// checkArgCount checks the arguments against the command's ArgsUsage:
// "NAME" is one argument, "[NAME]" an optional one, "NAME..." any number
// from one; no ArgsUsage means no arguments.
func checkArgCount(lv *argLevel, args []string) error {
	lo, hi := argRange(lv.cmd.ArgsUsage)
	if len(args) >= lo && (hi < 0 || len(args) <= hi) {
		return nil
	}
	if hi == 0 {
		return lv.errorf("expected no arguments, got %q", args)
	}
	want := strings.TrimSpace(lv.cmd.ArgsUsage)
	if lo == 1 && hi == 1 {
		want = "one " + want
	}
	return lv.errorf("expected %s, got %d arguments", want, len(args))
}

// argRange is the least and most arguments an ArgsUsage describes; most is
// -1 when unbounded.
func argRange(usage string) (lo, hi int) {
	for _, w := range strings.Fields(usage) {
		optional := strings.HasPrefix(w, "[")
		if strings.Contains(w, "...") {
			hi = -1
		} else if hi >= 0 {
			hi++
		}
		if !optional {
			lo++
		}
	}
	return lo, hi
}
