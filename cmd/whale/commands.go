package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"

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
		gcCommand(),
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
// urfave/cli. Flags typed after the arguments reach urfave/cli in front of
// them (see flagsFirst), so fn sees positional arguments only.
func action(fn func(c *cli.Context, args []string) error) cli.ActionFunc {
	return func(c *cli.Context) error { return fn(c, c.Args().Slice()) }
}

// rootFlag is the bucket URL every command that touches artifacts takes.
func rootFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "root",
		Usage:   "bucket `URL` holding runs and datasets: file:///abs/dir, s3://bucket/prefix?endpoint=...&use_path_style=true&region=..., gs://..., azblob://..., mem://",
		EnvVars: []string{"WHALE_ROOT"},
	}
}

// openRoot opens an existing root: a file:// root whose directory is
// missing is an error (a mistyped path must not read as an empty root, nor
// be created). createRoot (init, data import) makes one.
func openRoot(ctx context.Context, root string) (*storage.Store, error) {
	return openRootOpts(ctx, root, &storage.Options{MustExist: true})
}

func openRootOpts(ctx context.Context, root string, opts *storage.Options) (*storage.Store, error) {
	if root == "" {
		return nil, usagef("no bucket given: pass --root URL or set WHALE_ROOT")
	}
	s, err := storage.Open(ctx, root, opts)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			err = fmt.Errorf("%w; `whale init` and `whale data import` create a root", err)
		}
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
