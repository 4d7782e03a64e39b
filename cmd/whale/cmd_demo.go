package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/jobs"
)

type demoOptions struct {
	Dir string
}

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run whale's embedded demo on a local bucket: no GPU, no network, no keys",
		Description: `Creates a local bucket in --dir, writes the shipped example experiment
and sample chess puzzles next to it, freezes the experiment into a run,
imports the puzzles as committed datasets, and shows what was committed.
Running it again changes nothing: every step is idempotent.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "demo-bucket", Usage: "`DIR` for the local bucket and the example files"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 0 {
				return usagef("demo takes no arguments, got %q", args)
			}
			return runDemo(c.Context, demoOptions{Dir: c.String("dir")}, c.App.Writer)
		}),
	}
}

func runDemo(ctx context.Context, o demoOptions, out io.Writer) error {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	inputs := filepath.Join(dir, "inputs")
	if err := os.MkdirAll(inputs, 0o755); err != nil {
		return err
	}
	root := "file://" + filepath.Join(dir, "bucket")
	step := func(title string) { fmt.Fprintf(out, "\n== %s\n", title) }

	step("example files")
	for _, name := range []string{"chess-whale.yaml", "lichess-sample.csv"} {
		data, err := jobs.Examples.ReadFile("examples/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(inputs, name), data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", filepath.Join(inputs, name))
	}
	fmt.Fprintf(out, "bucket: %s\n", root)

	step("whale data import (train, search and test splits of the sample puzzles)")
	csv := filepath.Join(inputs, "lichess-sample.csv")
	for _, split := range []string{"train", "search", "test"} {
		if err := runImport(ctx, importOptions{Root: root, File: csv, Name: "lichess-" + split, Split: split}, out); err != nil {
			return err
		}
	}

	step("whale init")
	if err := runInit(ctx, initOptions{Root: root, Experiment: filepath.Join(inputs, "chess-whale.yaml")}, out); err != nil {
		return err
	}

	step("whale ls")
	if err := runLs(ctx, lsOptions{Root: root}, out); err != nil {
		return err
	}
	step("whale status chess-whale")
	if err := runStatus(ctx, statusOptions{Root: root, Run: "chess-whale"}, out); err != nil {
		return err
	}
	step("whale show datasets/lichess-train")
	if err := runShow(ctx, showOptions{Root: root, Target: "datasets/lichess-train", Rows: 3, Width: 40}, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nDone. Try: bin/whale ls --root %s\n", root)
	return nil
}
