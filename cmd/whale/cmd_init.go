package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/dataprep"
	"github.com/whalerun/whale/harness/archive"
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
and names the fields that differ (exit code 3). An existing run is
compared before the file is validated: a run frozen by an older whale
whose spec today's checks refuse (a new bound, the secret scan) inits
again from its own file, which prints those problems as warnings, while
a new run with that spec is refused (exit code 2).

Relative paths in the file (model.checkpoint) are read from the file's
directory and frozen as absolute paths, so runs do not depend on the
directory they start in (a run frozen by an older whale keeps the
relative path as written, compared from the file's directory or the one
init runs in). A checkpoint file of up to 64 MiB (the built-in
model's) is copied into the bucket under inputs/<sha256>/ with its digest;
a larger file or a directory (a Hugging Face checkpoint) stays where it is,
pinned by a digest of its file names, sizes and *.json contents. init
again with a checkpoint that has changed is a conflict naming the path
(exit code 3). init creates a file:// root that does not exist yet.

A new run's train, search and test datasets (data.*) must be disjoint:
init refuses (exit code 2) datasets that share a task id or a question
(lowercased, whitespace collapsed), naming the first few shared tasks; a
dataset not imported yet is not checked, and init says so.`,
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

// createRoot opens root, creating a file:// root's directory when it is
// missing: init and data import are the commands that start a root.
func createRoot(ctx context.Context, root string) (*storage.Store, error) {
	return openRootOpts(ctx, root, nil)
}

func runInit(ctx context.Context, o initOptions, out io.Writer) error {
	d, err := spec.Read(o.Experiment)
	if err != nil {
		return usageError{err}
	}
	if o.Name != "" {
		d.Exp.Name = o.Name
	}
	return initDraft(ctx, o.Root, d, o.Experiment, out)
}

// initExperiment freezes exp, built in Go (whale demo) as if read from
// source, into a run in root, or checks that the run there has the same
// spec and inputs.
func initExperiment(ctx context.Context, root string, exp *spec.Experiment, source string, out io.Writer) error {
	return initDraft(ctx, root, spec.DraftOf(exp, source), source, out)
}

// initDraft freezes the experiment of d (read from source) into a run in
// root, or checks that the run there has the same spec and inputs.
//
// A new run must pass every check. An existing run is compared first
// (spec.Draft.Reinit): a run frozen by an older whale whose spec today's
// checks refuse is the same run still, and init says so, with those
// problems as warnings. The inputs (see spec.Input) are read once: a small
// checkpoint file is copied into the bucket before run.json, the commit
// point, is written.
func initDraft(ctx context.Context, root string, d *spec.Draft, source string, out io.Writer) error {
	problems := d.Problems()
	name := d.Exp.Name
	if slices.ContainsFunc(problems, func(e *spec.Error) bool { return e.Path == "name" }) {
		return usageError{problems} // no run to look up
	}
	var store *storage.Store
	var err error
	if len(problems) == 0 {
		store, err = createRoot(ctx, root)
	} else {
		// Only an existing run may be inited from a spec with problems:
		// a root that does not exist holds none, and is not created.
		store, err = openRoot(ctx, root)
		if err != nil {
			return usageError{problems}
		}
	}
	if err != nil {
		return err
	}
	defer store.Close()
	cwd, _ := os.Getwd()
	key := runKey(name)
	exists, err := store.Exists(ctx, key)
	switch {
	case err != nil && len(problems) > 0:
		return usageError{problems}
	case err != nil:
		return err
	case !exists && len(problems) > 0:
		return usageError{problems}
	case !exists:
		created, err := initRun(ctx, store, d.Exp, cwd, source, out)
		if created || err != nil {
			return err
		}
		// Another init created the run first: compare with it.
	}
	prev, err := readRun(ctx, store, name)
	if err != nil {
		return err
	}
	exp, warnings, err := d.Reinit(prev, cwd)
	if err != nil {
		return err
	}
	inputs, _, err := spec.ReadInputs(exp)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", source, err)}
	}
	if err := prev.CheckInputsSame(inputs); err != nil {
		return err
	}
	fmt.Fprintf(out, "run %s already initialized with this spec (%s); nothing to do\n", name, prev.SpecDigest)
	for _, w := range warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	if len(warnings) > 0 {
		fmt.Fprintf(out, "note: run %s was frozen by whale %s, whose checks its spec passed; it is kept and runs as it is, but today's whale refuses a new run with this spec\n",
			name, prev.WhaleVersion)
	}
	for _, l := range spec.LegacyPaths(prev, exp, d.Dir, cwd) {
		fmt.Fprintf(out, "note: run %s (initialized by an older whale) keeps %s as the relative path %q, which each whale run reads from its working directory: start its runs from %s, or init a new run to pin the path\n",
			name, l.Field, spec.PathValue(&prev.Spec, l.Field), l.Dir)
	}
	for _, in := range prev.Unchecked(inputs) {
		fmt.Fprintf(out, "note: %s %s is not on this machine: not compared with what init froze (%s)\n", in.Field, in.Path, in.Digest)
	}
	if len(prev.Inputs) == 0 && len(inputs) > 0 {
		fmt.Fprintf(out, "note: run %s records no digest of its inputs (initialized by an older whale); they are not checked when it runs\n", name)
	}
	return nil
}

// initRun freezes exp into a new run in store, init running in cwd;
// false when another init created the run first.
func initRun(ctx context.Context, store *storage.Store, exp *spec.Experiment, cwd, source string, out io.Writer) (bool, error) {
	run, err := spec.Freeze(exp, buildinfo.Version(), time.Now())
	if err != nil {
		return false, usageError{fmt.Errorf("%s: %w", source, err)}
	}
	inputs, data, err := spec.ReadInputs(&run.Spec)
	if err != nil {
		return false, usageError{fmt.Errorf("%s: %w", source, err)}
	}
	run.Inputs = inputs
	run.Dir = cwd
	if err := checkDataOverlap(ctx, store, &run.Spec, out); err != nil {
		return false, fmt.Errorf("%s: %w", source, err)
	}
	if err := archiveInitial(ctx, store, &run.Spec, out); err != nil {
		return false, err
	}
	created, err := createRun(ctx, store, run, data)
	if !created || err != nil {
		return false, err
	}
	fmt.Fprintf(out, "initialized run %s at %s/%s (spec %s)\n", run.Spec.Name, store.URL(), runKey(run.Spec.Name), run.SpecDigest)
	printInputs(out, inputs)
	return true, nil
}

// createRun writes the copies of the run's copied inputs, then run.json
// with a conditional create; false when another init created run.json
// first.
func createRun(ctx context.Context, store *storage.Store, run *spec.Run, data map[string][]byte) (bool, error) {
	for _, in := range run.Inputs {
		if in.Kind != spec.InputCopied {
			continue
		}
		// The key is the content's digest: a copy already there (another
		// run's, or an earlier try's) is this one.
		err := store.CreateExclusive(ctx, in.Key, data[in.Key])
		if errors.Is(err, storage.ErrExists) {
			a, serr := store.Stat(ctx, in.Key)
			if serr != nil {
				return false, serr
			}
			if a.Size != in.Size {
				return false, fmt.Errorf("copy %s of %s %s: the bucket holds %d bytes under this digest, the file %d", in.Key, in.Field, in.Path, a.Size, in.Size)
			}
			err = nil
		}
		if err != nil {
			return false, fmt.Errorf("copy %s %s into the bucket: %w", in.Field, in.Path, err)
		}
	}
	raw, err := run.Encode()
	if err != nil {
		return false, err
	}
	err = store.CreateExclusive(ctx, runKey(run.Spec.Name), raw)
	if errors.Is(err, storage.ErrExists) {
		return false, nil
	}
	return err == nil, err
}

func printInputs(out io.Writer, inputs []spec.Input) {
	for _, in := range inputs {
		switch in.Kind {
		case spec.InputCopied:
			fmt.Fprintf(out, "  %s %s: copied into the bucket at %s (%s, %d bytes)\n", in.Field, in.Path, in.Key, in.Digest, in.Size)
		default:
			what := fmt.Sprintf("%d bytes", in.Size)
			if in.Files > 0 {
				what = fmt.Sprintf("%d files, %d bytes", in.Files, in.Size)
			}
			fmt.Fprintf(out, "  %s %s: pinned by the digest of its listing (%s, %s); it must not change while the run lasts\n", in.Field, in.Path, in.Digest, what)
		}
	}
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

// checkDataOverlap refuses a new run whose train, search and test datasets
// share a task id or a question: a test score on tasks the model trained
// on, or that the harness was chosen on, measures nothing. Datasets not
// imported yet are not checked, and a note says so.
func checkDataOverlap(ctx context.Context, store *storage.Store, e *spec.Experiment, out io.Writer) error {
	var sets []dataprep.Named
	for _, d := range []struct{ field, ref string }{{"data.train", e.Data.Train}, {"data.search", e.Data.Search}, {"data.test", e.Data.Test}} {
		name, ok := strings.CutPrefix(d.ref, storage.DatasetsPrefix)
		if !ok || storage.CheckDataset(name) != nil {
			continue // not a dataset of the root: the planner says what it accepts
		}
		sets = append(sets, dataprep.Named{Field: d.field, Dataset: name})
	}
	missing, err := dataprep.CheckOverlap(ctx, store, sets)
	if err != nil {
		return err
	}
	if len(missing) > 0 && len(sets) > 1 {
		for _, m := range missing {
			fmt.Fprintf(out, "note: %s is not in %s yet: not checked for tasks shared with the other datasets\n", m, store.URL())
		}
	}
	return nil
}

// archiveInitial stores a named built-in initial harness (harness.initial
// "h0-tags", say) in the root's harness archive before run.json, the
// commit point, is written: every stage reads it there by the content id
// the planner gives it. "h0" and ids need nothing.
func archiveInitial(ctx context.Context, store *storage.Store, exp *spec.Experiment, out io.Writer) error {
	src, ok, err := exp.BuiltinInitial()
	if err != nil || !ok {
		return err
	}
	id, err := archive.Put(ctx, store, src)
	if err != nil {
		return fmt.Errorf("archive harness.initial %s: %w", exp.Harness.Initial, err)
	}
	fmt.Fprintf(out, "harness.initial %s (domain %s) archived as %s\n", exp.Harness.Initial, exp.Domain, id)
	return nil
}
