package main

// gendocs.go: the hidden command that generates the bash and zsh
// completion scripts from the command and flag definitions, so they never
// drift from the binary. make install (scripts/install.sh) and make deb run
// it. The manuals are written by hand in man/ (man_test.go checks them
// against these definitions).

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

func genCompletionCommand() *cli.Command {
	return &cli.Command{
		Name:      "gen-completion",
		Usage:     "print the bash or zsh completion script",
		ArgsUsage: "bash|zsh",
		Hidden:    true,
		Action: func(c *cli.Context) error {
			tree := completionTree(c.App)
			switch c.Args().First() {
			case "bash":
				return writeBashCompletion(c.App.Writer, tree)
			case "zsh":
				return writeZshCompletion(c.App.Writer, tree)
			default:
				return usageErrorf(c, "%q: want bash or zsh", c.Args().First())
			}
		},
	}
}

// flagValues are the values completed after a flag (every command's flag
// of that name takes them). TestGenCompletionValues checks them against
// the flags' usage and the binary.
var flagValues = map[string][]string{
	"--transport":     {"auto", "iser", "tcp"},
	"--frontend":      {"ublk", "nbd"},
	"--path-selector": {"round-robin", "queue-length"},
	"--log-format":    {"console", "json"},
	"--log-level":     {"trace", "debug", "info", "warn", "error"},
}

// volumeArgs are the commands whose arguments are configured volume names
// (the NAME.conf files in $ISER_ATTACH_CONFIG_DIR, else
// /etc/iser-attach/volumes): true when they take several, false for one.
// --volume's value is one too.
var volumeArgs = map[string]bool{"attach": false, "detach": false, "resize": false, "stats": false, "volume/remove": false, "volume/check": true}

// compWord is one completion candidate: a command or a flag.
type compWord struct {
	Word, Usage string
}

// compNode is what completes after a command path ("" for the program,
// "volume/add"): its subcommands, then its flags.
type compNode struct {
	Path  string
	Words []compWord
}

// compTree is the completion model of the visible commands and flags.
type compTree struct {
	Nodes      []compNode
	ValueFlags []string // flags whose next word is a value (flagValues, --volume: a volume name, else a file name)
}

func completionTree(app *cli.App) compTree {
	var t compTree
	values := map[string]bool{}
	var walk func(path string, subs []*cli.Command, flags []cli.Flag)
	walk = func(path string, subs []*cli.Command, flags []cli.Flag) {
		n := compNode{Path: path}
		for _, s := range subs {
			if s.Hidden || s.Name == "help" {
				continue
			}
			n.Words = append(n.Words, compWord{s.Name, s.Usage})
		}
		if len(n.Words) > 0 {
			n.Words = append(n.Words, compWord{"help", "show a command's help"})
		}
		seen := map[string]bool{"help": true, "version": true} // added below
		for _, f := range flags {
			if seen[f.Names()[0]] {
				continue
			}
			seen[f.Names()[0]] = true
			if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
				continue
			}
			usage := ""
			if d, ok := f.(cli.DocGenerationFlag); ok {
				usage = d.GetUsage()
				if d.TakesValue() {
					values["--"+f.Names()[0]] = true
				}
			}
			n.Words = append(n.Words, compWord{"--" + f.Names()[0], usage})
		}
		n.Words = append(n.Words, compWord{"--help", "show help"})
		if path == "" && app.Version != "" {
			n.Words = append(n.Words, compWord{"--version", "print the version"})
		}
		t.Nodes = append(t.Nodes, n)
		for _, s := range subs {
			if s.Hidden || s.Name == "help" {
				continue
			}
			p := s.Name
			if path != "" {
				p = path + "/" + s.Name
			}
			walk(p, s.Subcommands, s.Flags)
		}
	}
	walk("", app.Commands, app.Flags)
	for f := range values {
		t.ValueFlags = append(t.ValueFlags, f)
	}
	sort.Strings(t.ValueFlags)
	return t
}

// commandPatterns is the shell case pattern list of "PARENT/COMMAND" for
// every command that has a node: a word matching it extends the path.
func (t compTree) commandPatterns() string {
	var pats []string
	for _, n := range t.Nodes {
		if n.Path == "" {
			continue
		}
		parent, name := "", n.Path
		if i := strings.LastIndexByte(n.Path, '/'); i >= 0 {
			parent, name = n.Path[:i], n.Path[i+1:]
		}
		pats = append(pats, parent+"/"+name)
	}
	return strings.Join(pats, " | ")
}

// valueCases is the shell case arms completing a value flag's known
// values: "--transport) ARM_auto iser tcp ;;" with arm producing the body.
func (t compTree) valueCases(arm func(values string) string) string {
	var b strings.Builder
	for _, f := range t.ValueFlags {
		if v, ok := flagValues[f]; ok {
			fmt.Fprintf(&b, "\t%s)\n\t\t%s\n\t\t;;\n", f, arm(strings.Join(v, " ")))
		}
	}
	return b.String()
}

// volumeArgCases is the shell case arms of volumeArgs: "attach | detach"
// for the commands taking one name, and those taking several.
func volumeArgCases() (one, several string) {
	var o, m []string
	for path, many := range volumeArgs {
		if many {
			m = append(m, path)
		} else {
			o = append(o, path)
		}
	}
	sort.Strings(o)
	sort.Strings(m)
	return strings.Join(o, " | "), strings.Join(m, " | ")
}

func writeBashCompletion(w io.Writer, t compTree) error {
	one, several := volumeArgCases()
	var b strings.Builder
	fmt.Fprintf(&b, "# bash completion for %[1]s; generated by '%[1]s gen-completion bash'.\n", appName)
	b.WriteString(`# The configured volumes: NAME of every NAME.conf.
_iser_attach_volumes() {
	local f
	for f in "${ISER_ATTACH_CONFIG_DIR:-/etc/iser-attach/volumes}"/*.conf; do
		[[ -f $f ]] || continue
		f=${f##*/}
		[[ $f == .* ]] || printf '%s\n' "${f%.conf}"
	done
}
_iser_attach() {
	local cur prev path w i words nargs=0
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD - 1]}
	# COMP_WORDBREAKS splits --flag=value into --flag, =, value.
	if [[ $cur == = ]]; then
		cur=
	elif [[ $prev == = ]]; then
		prev=${COMP_WORDS[COMP_CWORD - 2]}
	fi
	path=
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		case "$path/$w" in
		` + t.commandPatterns() + `)
			path=${path:+$path/}$w
			nargs=0
			continue
			;;
		esac
		case $w in
		` + strings.Join(t.ValueFlags, " | ") + `)
			[[ ${COMP_WORDS[i + 1]} != = ]] || ((i++))
			((i++))
			;;
		-* | =) ;;
		*) ((nargs++)) ;;
		esac
	done
	case $prev in
` + t.valueCases(func(v string) string {
		return `mapfile -t COMPREPLY < <(compgen -W "` + v + `" -- "$cur")` + "\n\t\treturn"
	}) + `	--volume)
		mapfile -t COMPREPLY < <(compgen -W "$(_iser_attach_volumes)" -- "$cur")
		return
		;;
	` + strings.Join(t.ValueFlags, " | ") + `)
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		return
		;;
	esac
	if [[ $cur != -* ]]; then
		words=
		case $path in
		` + one + `) ((nargs > 0)) || words=$(_iser_attach_volumes) ;;
		` + several + `) words=$(_iser_attach_volumes) ;;
		esac
		if [[ -n $words ]]; then
			mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
			return
		fi
	fi
	case $path in
`)
	for _, n := range t.Nodes {
		words := make([]string, len(n.Words))
		for i, cw := range n.Words {
			words[i] = cw.Word
		}
		fmt.Fprintf(&b, "\t'%s') words='%s' ;;\n", n.Path, strings.Join(words, " "))
	}
	fmt.Fprintf(&b, `	*) words= ;;
	esac
	mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}
complete -o default -F _iser_attach %s
`, appName)
	_, err := io.WriteString(w, b.String())
	return err
}

// zshEntry is a single-quoted _describe entry "word:usage".
func zshEntry(word, usage string) string {
	s := word + ":" + strings.ReplaceAll(usage, ":", `\:`)
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func writeZshCompletion(w io.Writer, t compTree) error {
	one, several := volumeArgCases()
	var b strings.Builder
	fmt.Fprintf(&b, "#compdef %[1]s\n# zsh completion for %[1]s; generated by '%[1]s gen-completion zsh'.\n", appName)
	b.WriteString(`# The configured volumes: NAME of every NAME.conf; fails when there is none.
_iser-attach_volumes() {
	local -a vols
	vols=(${ISER_ATTACH_CONFIG_DIR:-/etc/iser-attach/volumes}/*.conf(N-.:t:r))
	(( ${#vols} )) && compadd -a vols
}
_iser-attach() {
	local cmdpath= w i nargs=0
	local -a opts
	for ((i = 2; i < CURRENT; i++)); do
		w=${words[i]}
		case "$cmdpath/$w" in
		` + t.commandPatterns() + `)
			cmdpath=${cmdpath:+$cmdpath/}$w
			nargs=0
			continue
			;;
		esac
		case $w in
		` + strings.Join(t.ValueFlags, " | ") + `) ((i++)) ;;
		-*) ;;
		*) ((nargs++)) ;;
		esac
	done
	case ${words[CURRENT-1]} in
` + t.valueCases(func(v string) string { return "compadd -- " + v + "\n\t\treturn" }) + `	--volume)
		_iser-attach_volumes
		return
		;;
	` + strings.Join(t.ValueFlags, " | ") + `)
		_files
		return
		;;
	esac
	if [[ ${words[CURRENT]} != -* ]]; then
		case $cmdpath in
		` + one + `) ((nargs > 0)) || { _iser-attach_volumes && return } ;;
		` + several + `) _iser-attach_volumes && return ;;
		esac
	fi
	case $cmdpath in
`)
	for _, n := range t.Nodes {
		fmt.Fprintf(&b, "\t'%s') opts=(", n.Path)
		for i, cw := range n.Words {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(zshEntry(cw.Word, cw.Usage))
		}
		b.WriteString(") ;;\n")
	}
	b.WriteString(`	esac
	_describe -t commands 'iser-attach' opts || _files
}
_iser-attach "$@"
`)
	_, err := io.WriteString(w, b.String())
	return err
}
