package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/analysis"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

type analyzeOptions struct {
	Root   string
	Inputs []string // run names and local Parquet files, in order
	By     []string // nil: analysis.DefaultBy
	K      int
	Format string
}

func analyzeCommand() *cli.Command {
	return &cli.Command{
		Name:      "analyze",
		Usage:     "score rollouts: mean@k, pass@k, accuracy, turns, tokens and failures by round, stage, schedule, harness or model",
		ArgsUsage: "RUN... | FILE.parquet...",
		Description: `Reads the rollouts of every committed rollout and evaluate stage of each RUN
in --root (several runs compare schedules), or local rollouts Parquet files
(an argument ending in .parquet, or naming an existing file, is a file).
Only the columns the scores need are read: messages and traces never are.

Group columns (--by, comma-separated; "" puts every row in one group):
  run, schedule (from run.json; unknown for files), position (r003-w02),
  round (r003), section (weight, harness or test), stage (rollout or evaluate),
  harness_id (or harness), model_id (or model), task_id (or task).

Per group, scores are computed per task and averaged over tasks, as the
evaluate stage computes them: mean@k (mean reward), pass@k (unbiased
estimator, k = each task's sample count n unless --k), accuracy (fraction
correct), mean turns, mean prompt and completion tokens. FAILED counts
episodes with an error; FAIL% is their share of all episodes. A note says
when tasks have different n, since pass@n then means different things.

For each RUN, whatever --by says, a second table gives the test mean@k of
its final test evaluation and its peak (the best over all its tests, the
number the paper reports; the first test to reach it on a tie), each with
the position it was reached at: r002-wt (round r002, test, evaluate).
JSON has them under "headlines" (final and peak: position, round, section,
stage, mean_at_k, tasks, episodes, k_min, k_max); CSV prints them to stderr
as notes. Loose files have no headline.

Examples:
  whale analyze --root file:///data/whale chess-whale
  whale analyze chess-whale chess-weights-only --by schedule,round --k 4
  whale analyze part-*.parquet --by harness --format csv > scores.csv`,
		Flags: []cli.Flag{
			rootFlag(),
			&cli.StringFlag{Name: "by", Value: strings.Join(analysis.DefaultBy, ","), Usage: "group by these `COLUMNS`"},
			&cli.IntFlag{Name: "k", Usage: "score pass@`K` (0: K is each task's own sample count n)"},
			&cli.StringFlag{Name: "format", Value: analysis.FormatTable, Usage: "output `FORMAT`: " + strings.Join(analysis.Formats, ", ")},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) == 0 {
				return usagef("analyze takes one or more run names or Parquet files (see %s --help)", c.Command.HelpName)
			}
			by, err := analysis.ParseBy(c.String("by"))
			if err != nil {
				return usagef("--by: %v", err)
			}
			return runAnalyze(c.Context, analyzeOptions{Root: c.String("root"), Inputs: args, By: by, K: c.Int("k"),
				Format: c.String("format")}, c.App.Writer, c.App.ErrWriter)
		}),
	}
}

// isLocalFile decides how an argument is read. Run names cannot end in
// .parquet, so such an argument is always a file, even a missing one.
func isLocalFile(arg string) bool {
	if strings.HasSuffix(arg, ".parquet") {
		return true
	}
	st, err := os.Stat(arg)
	return err == nil && st.Mode().IsRegular()
}

func runAnalyze(ctx context.Context, o analyzeOptions, out, errOut io.Writer) error {
	if !slices.Contains(analysis.Formats, o.Format) {
		return usagef("--format: %q is not one of %s", o.Format, strings.Join(analysis.Formats, ", "))
	}
	if o.K < 0 {
		return usagef("--k: %d is negative (0 means each task's own sample count)", o.K)
	}
	a, err := analysis.New(analysis.Options{By: o.By, K: o.K})
	if err != nil {
		return usageError{err}
	}
	for i, in := range o.Inputs {
		if slices.Contains(o.Inputs[:i], in) {
			return usagef("%s is given twice; its rollouts would count twice", in)
		}
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// What the analysis keeps (sums, byte buffers) is little work for
		// the collector, so collecting at 1.4x the live heap rather than
		// 2x costs a few percent of CPU and keeps peak memory near what is
		// live: 1M rollouts analyse in under 100 MB.
		defer debug.SetGCPercent(debug.SetGCPercent(40))
	}
	var store *storage.Store
	var files []string // local files not yet read
	for _, in := range o.Inputs {
		if isLocalFile(in) {
			files = append(files, in)
			continue
		}
		// Consecutive files are read together, their row groups in
		// parallel.
		if err := analyzeFiles(ctx, a, files); err != nil {
			return err
		}
		files = nil
		if err := storage.CheckRun(in); err != nil {
			return usagef("%s is neither a file nor a run name: %v", in, err)
		}
		if store == nil {
			if store, err = openRoot(ctx, o.Root); err != nil {
				return err
			}
			defer store.Close()
		}
		run, err := readRun(ctx, store, in)
		if err != nil {
			return err
		}
		if _, err := a.AddRun(ctx, store, in, run.Spec.Schedule); err != nil {
			if badData(err) {
				return usageError{fmt.Errorf("analyze run %s: %w", in, err)}
			}
			return fmt.Errorf("analyze run %s: %w", in, err)
		}
	}
	if err := analyzeFiles(ctx, a, files); err != nil {
		return err
	}
	r := a.Result()
	if err := r.Write(out, o.Format); err != nil {
		return err
	}
	if o.Format == analysis.FormatCSV {
		// CSV has no place for them, and stdout may be a file.
		for _, h := range r.Headlines {
			fmt.Fprintln(errOut, "note:", h.Line())
		}
		for _, n := range r.Notes {
			fmt.Fprintln(errOut, "note:", n)
		}
	}
	return nil
}

// badData reports whether err says a file is not a readable rollouts table.
func badData(err error) bool {
	return errors.Is(err, schemas.ErrSchemaMismatch) || errors.Is(err, schemas.ErrNewerSchema)
}

// analyzeFiles reads local rollouts files into a.
func analyzeFiles(ctx context.Context, a *analysis.Analyzer, paths []string) error {
	var files []analysis.File
	defer func() {
		for _, f := range files {
			f.R.(*os.File).Close()
		}
	}()
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return usageError{fmt.Errorf("analyze: %w (a .parquet argument is a local file; analyze committed stages by run name)", err)}
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return fmt.Errorf("analyze %s: %w", path, err)
		}
		files = append(files, analysis.File{Name: path, R: f, Size: st.Size()})
	}
	if err := a.AddFiles(ctx, files); err != nil {
		if ctx.Err() != nil {
			return err
		}
		// A local file that is not a rollouts table, or not Parquet at
		// all, is bad input.
		return usageError{fmt.Errorf("analyze %w", err)}
	}
	return nil
}
