package main

import (
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// Flags after positional arguments.
//
// urfave/cli v2 hands each command's arguments to Go's flag package, which
// stops at the first positional argument, and v2 has no setting to go on
// past it. Yet `whale stage rollout RUN --at r001-w01` is how the README,
// the help and people write a command. So before the app parses anything,
// flagsFirst rewrites the command line: the flags of the command that runs
// move, each with its value, in front of that command's positional
// arguments, and a "--" separates the two. urfave/cli then parses every
// flag itself, Required, types, defaults, environment and help included,
// as if it had been typed first.

// flagsFirst returns args (os.Args: the program name first) with the flags
// of the command it runs moved before that command's positional arguments.
// It follows the command path as urfave/cli will: each level's own flags,
// then a command name, down to a command without subcommands. A line it
// cannot follow (an unknown command or flag on the way, "--" before the
// command) is returned as it is, for urfave/cli to report.
//
// In the command's own arguments a value flag ("--at POS", "--at=POS")
// keeps its value, whatever it looks like; "--" ends the flags, and what
// follows it stays positional; a lone "-" is positional. A flag that names
// none of the command's flags, or lacks its value, ends the rewriting:
// what is left is dropped, since parsing fails on that flag anyway. A help
// flag alone is kept, so that `whale init x.yaml --help` shows init's help.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	withVersion := !app.HideVersion && app.Version != ""
	flags, cmds := levelFlags(app.Flags, app.HideHelp, withVersion), app.Commands
	out := []string{args[0]}
	rest := args[1:]
	for {
		n, ok := leadingFlags(rest, flags)
		if !ok || n == len(rest) {
			return args
		}
		cmd := findCommand(cmds, rest[n])
		if cmd == nil {
			return args
		}
		out = append(out, rest[:n+1]...)
		rest = rest[n+1:]
		if len(cmd.Subcommands) > 0 {
			flags, cmds = levelFlags(cmd.Flags, cmd.HideHelp, false), cmd.Subcommands
			continue
		}
		if cmd.SkipFlagParsing {
			return args
		}
		return append(out, reorder(rest, levelFlags(cmd.Flags, cmd.HideHelp, false))...)
	}
}

// reorder puts a command's flags (with their values) first, then "--",
// then its positional arguments.
func reorder(args []string, flags []cli.Flag) []string {
	var fl, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		name, value, hasValue, isFlag := splitFlag(a)
		if !isFlag {
			pos = append(pos, a)
			continue
		}
		f := findFlag(flags, name)
		switch {
		case f == nil:
			return append(fl, a) // "flag provided but not defined"
		case isHelpFlag(f) && (!hasValue || isTrue(value)):
			return []string{a}
		case hasValue || !takesValue(f):
			fl = append(fl, a)
		case i+1 == len(args):
			return append(fl, a) // "flag needs an argument"
		default:
			fl = append(fl, a, args[i+1])
			i++
		}
	}
	return append(append(fl, "--"), pos...)
}

// leadingFlags counts the arguments that the flags at the start of args
// take up, with their values. ok is false where the flags end in a way
// that parsing will report or that ends the command path: an unknown
// flag, a value missing, "--".
func leadingFlags(args []string, flags []cli.Flag) (n int, ok bool) {
	for n < len(args) {
		if args[n] == "--" {
			return n, false
		}
		name, _, hasValue, isFlag := splitFlag(args[n])
		if !isFlag {
			return n, true
		}
		f := findFlag(flags, name)
		switch {
		case f == nil:
			return n, false
		case hasValue || !takesValue(f):
			n++
		case n+1 == len(args):
			return n, false
		default:
			n += 2
		}
	}
	return n, true
}

// splitFlag reads a as Go's flag package does: "-name", "--name",
// "-name=value" or "--name=value". "-" and "--" are not flags; a malformed
// one ("---x", "-=x") comes back with an empty name, which names no flag.
func splitFlag(a string) (name, value string, hasValue, isFlag bool) {
	if len(a) < 2 || a[0] != '-' || a == "--" {
		return "", "", false, false
	}
	s := strings.TrimPrefix(a[1:], "-")
	if s == "" || s[0] == '-' || s[0] == '=' {
		return "", "", false, true
	}
	name, value, hasValue = strings.Cut(s, "=")
	return name, value, hasValue, true
}

// levelFlags are the flags one level of the command path parses: its own
// and those urfave/cli adds (help; version at the top).
func levelFlags(own []cli.Flag, hideHelp, withVersion bool) []cli.Flag {
	flags := slices.Clip(own)
	if !hideHelp && cli.HelpFlag != nil {
		flags = append(flags, cli.HelpFlag)
	}
	if withVersion && cli.VersionFlag != nil {
		flags = append(flags, cli.VersionFlag)
	}
	return flags
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	if name == "" {
		return nil
	}
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// takesValue tells a flag that consumes the next argument from a boolean
// one, as Go's flag package does (a Value with IsBoolFlag is boolean).
func takesValue(f cli.Flag) bool {
	if g, ok := f.(*cli.GenericFlag); ok {
		b, isBool := g.Value.(interface{ IsBoolFlag() bool })
		return !isBool || !b.IsBoolFlag()
	}
	if d, ok := f.(cli.DocGenerationFlag); ok {
		return d.TakesValue()
	}
	return true
}

func isHelpFlag(f cli.Flag) bool { return cli.HelpFlag != nil && f == cli.HelpFlag }

func isTrue(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}
