package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/internal/buildinfo"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

type initOptions struct {
	Root       string
	Experiment string // path of the experiment file
	Name       string // overrides the file's name
}

func initCommand() *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "freeze an experiment file into a run: runs/<name>/run.json with defaults filled and a digest",
		ArgsUsage: "EXPERIMENT.yaml",
		Description: `Reads the experiment file strictly (an unknown field or a wrong type is an
error naming the line and the field), fills every default from the paper's
settings, validates the result and writes it, with its sha256 digest and
whale's version, to runs/<name>/run.json. That file is never rewritten:
init again with the same spec does nothing; with a different spec it fails
and names the fields that differ (exit code 3).`,
		Flags: []cli.Flag{
			rootFlag(),
			&cli.StringFlag{Name: "name", Usage: "run `NAME`, instead of the file's name field"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 1 {
				return usagef("init takes one experiment file, got %d arguments", len(args))
			}
			return runInit(c.Context, initOptions{Root: c.String("root"), Experiment: args[0], Name: c.String("name")}, c.App.Writer)
		}),
	}
}

func runKey(run string) string { return storage.Join("runs", run, "run.json") }

func runInit(ctx context.Context, o initOptions, out io.Writer) error {
	exp, err := spec.Load(o.Experiment)
	if err != nil {
		return usageError{err}
	}
	if o.Name != "" {
		exp.Name = o.Name
	}
	return initExperiment(ctx, o.Root, exp, o.Experiment, out)
}

// initExperiment freezes exp (read from source) into a run in root, or
// checks that the run there has the same spec.
func initExperiment(ctx context.Context, root string, exp *spec.Experiment, source string, out io.Writer) error {
	run, err := spec.Freeze(exp, buildinfo.Version(), time.Now())
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", source, err)}
	}
	data, err := run.Encode()
	if err != nil {
		return err
	}
	store, err := openRoot(ctx, root)
	if err != nil {
		return err
	}
	defer store.Close()
	key := runKey(run.Spec.Name)
	err = store.CreateExclusive(ctx, key, data)
	switch {
	case err == nil:
		fmt.Fprintf(out, "initialized run %s at %s/%s (spec %s)\n", run.Spec.Name, store.URL(), key, run.SpecDigest)
		return nil
	case !errors.Is(err, storage.ErrExists):
		return err
	}
	prev, err := readRun(ctx, store, run.Spec.Name)
	if err != nil {
		return err
	}
	if err := spec.CheckSame(prev, exp); err != nil {
		return err
	}
	fmt.Fprintf(out, "run %s already initialized with this spec (%s); nothing to do\n", run.Spec.Name, prev.SpecDigest)
	return nil
}

func readRun(ctx context.Context, store *storage.Store, name string) (*spec.Run, error) {
	key := runKey(name)
	data, err := store.ReadAll(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, usagef("no run %q in %s (expected %s; create it with whale init)", name, store.URL(), key)
	}
	if err != nil {
		return nil, err
	}
	run, err := spec.DecodeRun(key, data)
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", store.URL(), key, err)
	}
	return run, nil
}
