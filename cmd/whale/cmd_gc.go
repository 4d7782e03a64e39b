package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/storage"
)

// ---- gc

// defaultGCAge is gc's --older-than. It is the only guard for attempts in
// flight (see gcCommand), so it is long: a shard's files appear only when
// it finishes, and a Slurm array task may wait in the queue, run up to its
// time limit (often one or two days), fail and be requeued, while its
// attempt folder shows nothing newer than when the attempt began.
const defaultGCAge = 72 * time.Hour

type gcOptions struct {
	Root      string
	Run       string
	OlderThan time.Duration
	DryRun    bool
}

func gcCommand() *cli.Command {
	return &cli.Command{
		Name:      "gc",
		Usage:     "delete a run's stage garbage: uncommitted leftovers and attempts superseded by a --force rerun",
		ArgsUsage: "RUN",
		Description: `Deletes, under runs/RUN/stages/ only, what no reader trusts:

   not in manifest          a file in a committed stage folder that its _MANIFEST.json
                            does not name (a try that crashed or lost its shard's commit race)
   uncommitted attempt      every object of an attempt folder without a _MANIFEST.json
                            whose newest object is older than --older-than
   superseded by attempt N  every object of a committed attempt that a newer committed
                            attempt at the same position replaced (whale stage --force)
                            more than --older-than ago

It never deletes the latest committed attempt of a stage at a position, nor
a superseded attempt that a current stage names as its input, nor anything
outside runs/RUN/stages/ (run.json, the ledger, the lease, harnesses,
models). A superseded attempt loses its _MANIFEST.json first, so that a
crash halfway leaves an uncommitted folder that readers ignore and the next
gc finishes, never a committed stage with files missing.

--older-than is the only guard for work in flight, and gc takes no lease:
shards of a Slurm array run without the run's lease, and holding it would
stop a 'whale run' between two steps. A shard's files appear only when it
finishes, so an attempt still running may show nothing newer than its start;
set --older-than above the longest a stage may take, queue waits and
requeues included (the default, 72h, is above common Slurm time limits). A
reader that picked an attempt just before --force superseded it has as long
to finish. Use --dry-run to see what would go.`,
		Flags: []cli.Flag{
			rootFlag(),
			&cli.DurationFlag{Name: "older-than", Value: defaultGCAge, Usage: "delete only what has been garbage at least this `DURATION` (e.g. 72h, 30m)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be deleted, and why, and delete nothing"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			run, err := oneRun(args)
			if err != nil {
				return err
			}
			return runGC(c.Context, gcOptions{Root: c.String("root"), Run: run, OlderThan: c.Duration("older-than"),
				DryRun: c.Bool("dry-run")}, c.App.Writer)
		}),
	}
}

func runGC(ctx context.Context, o gcOptions, out io.Writer) error {
	if err := storage.CheckRun(o.Run); err != nil {
		return err
	}
	if o.OlderThan < 0 {
		return usagef("--older-than %s: want a duration of 0 or more", o.OlderThan)
	}
	store, err := openRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer store.Close()
	if _, err := readRun(ctx, store, o.Run); err != nil {
		return err
	}
	log := slog.With("run", o.Run, "root", store.URL(), "older_than", o.OlderThan, "dry_run", o.DryRun)
	log.Debug("gc: listing garbage")
	g, err := storage.Garbage(ctx, store, o.Run, o.OlderThan)
	if err != nil {
		return fmt.Errorf("gc run %s: %w", o.Run, err)
	}
	if len(g) == 0 {
		fmt.Fprintf(out, "no garbage older than %s in run %s\n", o.OlderThan, o.Run)
		return nil
	}
	var size int64
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSIZE\tWHY")
	for _, e := range g {
		size += e.Size
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Key, humanBytes(e.Size), e.Why())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.DryRun {
		fmt.Fprintf(out, "would delete %d object(s), %s, from run %s (dry run: nothing deleted)\n", len(g), humanBytes(size), o.Run)
		return nil
	}
	done, err := storage.DeleteGarbage(ctx, store, g)
	if err != nil {
		return fmt.Errorf("gc run %s: deleted %d of %d object(s), then: %w", o.Run, done.Objects, len(g), err)
	}
	log.Info("gc: done", "deleted", done.Objects, "bytes", done.Bytes, "skipped", len(done.Skipped))
	fmt.Fprintf(out, "deleted %d object(s), %s, from run %s\n", done.Objects, humanBytes(done.Bytes), o.Run)
	if len(done.Skipped) > 0 {
		fmt.Fprintf(out, "left %d attempt(s) written to since listed: %s\n", len(done.Skipped), strings.Join(done.Skipped, ", "))
	}
	return nil
}
