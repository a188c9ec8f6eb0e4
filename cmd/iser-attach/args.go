package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// withInterspersedFlags lets flags follow arguments ("volume add NAME
// --portal P"): urfave/cli v2 stops parsing flags at the first argument.
// When an argument looks like a flag, the command's arguments are parsed
// again with its flags, arguments set aside; "--" ends the flags.
func withInterspersedFlags(action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		lineage := c.Lineage()
		if !hasFlagLikeArg(c.Args().Slice()) || len(lineage) < 2 {
			return action(c)
		}
		parent := lineage[1]
		set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
		set.SetOutput(io.Discard)
		for _, f := range c.Command.Flags {
			if err := f.Apply(set); err != nil {
				return err
			}
		}
		var positional []string
		args := parent.Args().Tail() // everything after the command's name
		for {
			if err := set.Parse(args); err != nil {
				return fmt.Errorf("%s: %w", c.Command.FullName(), err)
			}
			rest := set.Args()
			if len(rest) == 0 {
				break
			}
			if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
				positional = append(positional, rest...)
				break
			}
			positional, args = append(positional, rest[0]), rest[1:]
		}
		if err := set.Parse(append([]string{"--"}, positional...)); err != nil {
			return err
		}
		nc := cli.NewContext(c.App, set, parent)
		nc.Command = c.Command
		if nc.Bool("help") {
			return cli.ShowCommandHelp(parent, c.Command.Name)
		}
		return action(nc)
	}
}

func hasFlagLikeArg(args []string) bool {
	for _, a := range args {
		if len(a) > 1 && a[0] == '-' {
			return true
		}
	}
	return false
}
