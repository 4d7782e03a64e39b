package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/internal/buildinfo"
	"github.com/whalerun/whale/storage"
)

func commands() []*cli.Command {
	cmds := []*cli.Command{
		initCommand(),
		planCommand(),
		stepCommand(),
		runCommand(),
		stageCommand(),
		submitCommand(),
		statusCommand(),
		lsCommand(),
		showCommand(),
		analyzeCommand(),
		reportCommand(),
		dataCommand(),
		indexCommand(),
		harnessCommand(),
		demoCommand(),
		localCommand(),
		versionCommand(),
	}
	for _, c := range cmds {
		setUsageErrors(c)
	}
	return cmds
}

// onUsageError makes a flag urfave could not parse a usage error (exit
// code 2, as documented) instead of a failure, and points at the help.
func onUsageError(c *cli.Context, err error, isSubcommand bool) error {
	name := "whale"
	if isSubcommand && c.Command != nil {
		name = c.Command.HelpName
	}
	return usagef("%v (see %s --help)", err, name)
}

func setUsageErrors(c *cli.Command) {
	c.OnUsageError = onUsageError
	for _, sub := range c.Subcommands {
		setUsageErrors(sub)
	}
}

// unknownCommand is the app's action and unknownSubcommand that of
// commands that only group subcommands: an argument that names none of
// them is a usage error, where urfave/cli would answer "No help topic"
// with exit code 1.
func unknownCommand(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("unknown command %q (see whale --help)", c.Args().First())
	}
	return cli.ShowAppHelp(c)
}

func unknownSubcommand(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("unknown command %q (see %s --help)", c.Args().First(), c.Command.HelpName)
	}
	return cli.ShowSubcommandHelp(c)
}

// action adapts fn, which takes the command's positional arguments, to
// urfave/cli. urfave/cli v2 stops parsing flags at the first positional
// argument, but `whale data import FILE --name N` is how people type it:
// flags that follow the arguments are applied here.
func action(fn func(c *cli.Context, args []string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		args, help, err := positional(c)
		if err != nil {
			return err
		}
		if help {
			cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, c.Command)
			return nil
		}
		return fn(c, args)
	}
}

// positional splits what urfave/cli left as arguments into positional
// arguments and flags, and sets the flags on c. A "--" after the first
// argument ends the flags (one before it is consumed by urfave/cli, out of
// sight); an argument that starts with "-" and names no flag of the
// command is a usage error, so pass a file named like a flag as ./-name.
func positional(c *cli.Context) (args []string, help bool, err error) {
	raw := c.Args().Slice()
	for i := 0; i < len(raw); i++ {
		a := raw[i]
		if a == "--" {
			return append(args, raw[i+1:]...), false, nil
		}
		if len(a) < 2 || a[0] != '-' {
			args = append(args, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := findFlag(c.Command.Flags, name)
		if f == nil {
			return nil, false, usagef("flag provided but not defined: %s (see %s --help)", a, c.Command.HelpName)
		}
		primary := f.Names()[0]
		if primary == "help" {
			return nil, true, nil
		}
		if tv, ok := f.(interface{ TakesValue() bool }); ok && !tv.TakesValue() {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(raw) {
				return nil, false, usagef("flag needs an argument: %s (see %s --help)", a, c.Command.HelpName)
			}
			i++
			value = raw[i]
		}
		if err := c.Set(primary, value); err != nil {
			return nil, false, usagef("invalid value %q for flag %s: %v (see %s --help)", value, a, err, c.Command.HelpName)
		}
	}
	return args, false, nil
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// rootFlag is the bucket URL every command that touches artifacts takes.
func rootFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "root",
		Usage:   "bucket `URL` holding runs and datasets: file:///abs/dir, s3://bucket/prefix?endpoint=...&use_path_style=true&region=..., gs://..., azblob://..., mem://",
		EnvVars: []string{"WHALE_ROOT"},
	}
}

func openRoot(ctx context.Context, root string) (*storage.Store, error) {
	if root == "" {
		return nil, usagef("no bucket given: pass --root URL or set WHALE_ROOT")
	}
	s, err := storage.Open(ctx, root, nil)
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print whale's version, the Go version and the platform",
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 0 {
				return usagef("version takes no arguments")
			}
			return runVersion(c.App.Writer)
		}),
	}
}

func runVersion(w io.Writer) error {
	_, err := fmt.Fprintf(w, "whale %s (%s, %s/%s)\n", buildinfo.Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
