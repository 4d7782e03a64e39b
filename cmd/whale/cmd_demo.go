package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/internal/progress"
	"github.com/whalerun/whale/jobs"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/report"
	"github.com/whalerun/whale/storage"
)

type demoOptions struct {
	Dir string
	// Budget overrides budget.rollouts of every variant (0: the file's).
	Budget int64
	// Quick shrinks the experiment to seconds, for tests and a first look.
	Quick bool
}

// demoVariant is one schedule of the comparison; everything else is the
// shipped demo.yaml.
type demoVariant struct {
	name, schedule, mode string
}

var demoVariants = []demoVariant{
	{"demo-whale-fixed", spec.ScheduleWhale, spec.SwitchFixed},
	{"demo-whale-patience", spec.ScheduleWhale, spec.SwitchPatience},
	{"demo-weights-only", spec.ScheduleWeightsOnly, spec.SwitchFixed},
	{"demo-harness-only", spec.ScheduleHarnessOnly, spec.SwitchFixed},
}

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run a complete WHALE comparison on the built-in model: no GPU, no network, no keys",
		Description: `Creates a local bucket in --dir, imports the demo domain's tasks (single-digit
arithmetic: train, search and held-out test splits), writes the committed
starting checkpoint and the experiment (jobs/examples/demo.yaml) next to it,
and runs the experiment four times at the same rollout budget: whale with
the fixed switch, whale with the patience switch, weights-only and
harness-only. Every run samples from the built-in model, fine-tunes it on
CPU, searches harnesses with the mutate proposer and scores mean@8 on the
test split after each phase. Then it writes an HTML report to DIR/report.

Logs go to DIR/logs/demo.log. Running it again resumes or, when finished,
changes nothing: every stage is committed once.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "demo-bucket", Usage: "`DIR` for the local bucket, the inputs, the logs and the report"},
			&cli.Int64Flag{Name: "budget", Usage: "budget.rollouts of every run (default: the example's)"},
			&cli.BoolFlag{Name: "quick", Usage: "a small version that runs in seconds (smaller batches, search and test sets)"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 0 {
				return usagef("demo takes no arguments, got %q", args)
			}
			if c.Int64("budget") < 0 {
				return usagef("--budget %d: want a positive number of rollouts", c.Int64("budget"))
			}
			return runDemo(c.Context, demoOptions{Dir: c.String("dir"), Budget: c.Int64("budget"), Quick: c.Bool("quick")}, c.App.Writer)
		}),
	}
}

func runDemo(ctx context.Context, o demoOptions, out io.Writer) error {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	inputs := filepath.Join(dir, "inputs")
	logs := filepath.Join(dir, "logs")
	for _, d := range []string{inputs, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	root := "file://" + filepath.Join(dir, "bucket")
	fmt.Fprintf(out, "whale demo: bucket %s\n", root)

	exp, err := demoExperiment(inputs, o)
	if err != nil {
		return err
	}
	paths, err := demo.WriteDatasets(inputs, uint64(exp.Seed))
	if err != nil {
		return err
	}
	quiet := io.Discard
	for i, split := range []string{demo.SplitTrain, demo.SplitSearch, demo.SplitTest} {
		if err := runImport(ctx, importOptions{Root: root, File: paths[i], Name: "demo-" + split}, quiet); err != nil {
			return fmt.Errorf("import %s: %w", paths[i], err)
		}
	}
	fmt.Fprintf(out, "tasks: %d train, %d search, %d test (%s)\n",
		demo.SplitSize(demo.SplitTrain), min(exp.Harness.SearchSetSize, demo.SplitSize(demo.SplitSearch)), demo.SplitSize(demo.SplitTest), inputs)
	var names []string
	for _, v := range demoVariants {
		e := exp.Clone()
		e.Name, e.Schedule, e.Switch.Mode = v.name, v.schedule, v.mode
		e.Description = fmt.Sprintf("whale demo: %s", demoLabel(e))
		if err := initExperiment(ctx, root, e, filepath.Join(inputs, "demo.yaml"), quiet); err != nil {
			return fmt.Errorf("init %s: %w", v.name, err)
		}
		names = append(names, v.name)
	}
	fmt.Fprintf(out, "runs: %d at budget.rollouts %d each; logs in %s\n\n", len(names), exp.Budget.Rollouts, filepath.Join(logs, "demo.log"))

	logFile, err := os.OpenFile(filepath.Join(logs, "demo.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Stages that log through the default logger write to the file too: the
	// terminal belongs to the progress board.
	prev := slog.Default()
	slog.SetDefault(log)
	defer slog.SetDefault(prev)

	board := progress.NewBoard(out)
	rows := make([]*progress.Row, len(names))
	for i, n := range names {
		rows[i] = board.Add(n, exp.Budget.Rollouts)
	}
	for i, n := range names {
		if err := demoRun(ctx, root, n, rows[i], board.Drawing(), logFile, out); err != nil {
			board.Close()
			return err
		}
	}
	board.Close()

	fmt.Fprintln(out)
	d, err := writeReport(ctx, reportOptions{Root: root, Runs: names, Out: filepath.Join(dir, "report")}, quiet)
	if err != nil {
		return err
	}
	// The table is the report's own reading of the artifacts, so a rerun of
	// a finished demo shows the numbers of the run that made them.
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tschedule\trollouts\ttests\tfinal mean@%d\tpeak (at)\twall\n", exp.Eval.K)
	for _, r := range d.Runs {
		final, peak := "-", "-"
		if r.Final != nil {
			final = fmt.Sprintf("%.3f", r.Final.MeanAtK)
		}
		if r.Peak != nil {
			peak = fmt.Sprintf("%.3f (%s)", r.Peak.MeanAtK, r.Peak.Position)
		}
		wall := time.Duration(r.WallSeconds * float64(time.Second)).Round(time.Second)
		schedule := r.Schedule
		if r.Switch != "" {
			schedule += " (" + r.Switch + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Name, schedule, r.Rollouts, len(r.Tests), final, peak, wall)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "\n%s\n", filepath.Join(dir, "report", report.IndexName))
	return err
}

// demoExperiment is the shipped demo.yaml with the checkpoint written next
// to it, and the --quick and --budget changes.
func demoExperiment(inputs string, o demoOptions) (*spec.Experiment, error) {
	src, err := jobs.Examples.ReadFile("examples/demo.yaml")
	if err != nil {
		return nil, err
	}
	yamlPath := filepath.Join(inputs, "demo.yaml")
	ckpt := filepath.Join(inputs, "pretrained.wlm")
	for path, data := range map[string][]byte{yamlPath: src, ckpt: demo.PretrainedCheckpoint()} {
		if err := writeIfChanged(path, data); err != nil {
			return nil, err
		}
	}
	exp, err := spec.Parse(yamlPath, src)
	if err != nil {
		return nil, err
	}
	exp.Model.Checkpoint = ckpt
	if o.Quick {
		// Seconds instead of minutes: a few small steps and iterations
		// still run every stage of every schedule.
		exp.RSFT.BatchSize, exp.RSFT.GroupSize = 16, 2
		exp.Switch.Fixed.Epochs, exp.Switch.Fixed.Iterations = 0.2, 2
		p := &exp.Switch.Patience
		p.Window, p.BurnIn, p.Patience, p.HarnessMin, p.HarnessPatience, p.HarnessCap = 0.1, 0.1, 0.1, 1, 1, 3
		exp.Harness.SearchSetSize, exp.Harness.SamplesPerCandidate = 10, 1
		exp.Eval.K = 2
		exp.Budget.Rollouts = 300
	}
	if o.Budget > 0 {
		exp.Budget.Rollouts = o.Budget
	}
	return exp, nil
}

// writeIfChanged writes data to path unless the file holds it already, so
// that a rerun leaves the inputs as they were.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

func demoLabel(e *spec.Experiment) string {
	if e.Alternates() {
		return e.Schedule + " (" + e.Switch.Mode + ")"
	}
	return e.Schedule
}

// demoRun runs one variant to its end, moving its row on the board, or
// printing a line per test when the board does not draw.
//
// It runs as whale run does (newRunner); the caller has made the default
// logger write to logFile.
func demoRun(ctx context.Context, root, name string, row *progress.Row, drawing bool, logFile, out io.Writer) error {
	r, closeAll, err := newRunner(ctx, runOptions{Root: root, Run: name}, logFile)
	if err != nil {
		return err
	}
	defer closeAll()
	start := time.Now()
	var spent int64
	var lastTest, reason string
	err = r.RunToEnd(ctx, func(s *pipeline.StepResult) {
		d := s.Plan.Decision
		spent = int64(d.Signals["rollouts_spent"])
		if s.Plan.Done() {
			reason = d.Reason
			return
		}
		if d.Kind == schedule.KindTest && s.Result.Manifest != nil {
			if v, ok := s.Result.Manifest.Summary["best_score"].(float64); ok {
				lastTest = fmt.Sprintf("test %.3f at %s", v, d.Position)
			}
		}
		// The signal is the spend before this unit; the unit's own
		// rollouts count once the stage that ran them commits.
		if s.Plan.Stage == pipeline.StageRollout || (d.Kind == schedule.KindHarness && s.Plan.Stage == pipeline.StageEvaluate) {
			if s.Result.Manifest != nil {
				spent += int64(storage.SummaryNumber(s.Result.Manifest.Summary, "episodes"))
			}
		}
		row.Set(spent, fmt.Sprintf("%s %s · %s", s.Plan.Stage, d.Position, cmp.Or(lastTest, "no test yet")))
		if !drawing && d.Kind == schedule.KindTest {
			fmt.Fprintf(out, "%-20s %6d rollouts  %s\n", name, spent, lastTest)
		}
	})
	if err != nil {
		row.Set(spent, "failed: "+err.Error())
		var held *storage.LeaseHeldError
		if errors.As(err, &held) {
			return fmt.Errorf("run %s is busy (another whale holds it): %w", name, err)
		}
		return fmt.Errorf("run %s: %w (details in the log)", name, err)
	}
	row.Done(strings.TrimSuffix("done · "+lastTest, " · "))
	if !drawing {
		fmt.Fprintf(out, "%-20s done in %s: %s\n", name, time.Since(start).Round(time.Second), reason)
	}
	return nil
}
