package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/internal/progress"
	"github.com/whalerun/whale/jobs"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
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

// demoRunResult is what the summary table shows of one run.
type demoRunResult struct {
	name, schedule string
	rollouts       int64
	tests          int
	finalTest      float64
	reason         string
	wall           time.Duration
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
	var quiet discardWriter
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

	store, err := openRoot(ctx, root)
	if err != nil {
		return err
	}
	defer store.Close()
	board := progress.NewBoard(out)
	rows := make([]*progress.Row, len(names))
	for i, n := range names {
		rows[i] = board.Add(n, exp.Budget.Rollouts)
	}
	var results []demoRunResult
	for i, n := range names {
		r, err := demoRun(ctx, store, n, rows[i], board.Drawing(), log, logFile, out)
		if err != nil {
			board.Close()
			return err
		}
		results = append(results, r)
	}
	board.Close()

	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tschedule\trollouts\ttests\tfinal mean@%d\twall\n", exp.Eval.K)
	for _, r := range results {
		final := "-"
		if r.tests > 0 {
			final = fmt.Sprintf("%.3f", r.finalTest)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.name, r.schedule, r.rollouts, r.tests, final, r.wall.Round(time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return runReport(ctx, reportOptions{Root: root, Runs: names, Out: filepath.Join(dir, "report")}, out)
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
	if e.Schedule == spec.ScheduleWhale || e.Schedule == spec.ScheduleFST {
		return e.Schedule + " (" + e.Switch.Mode + ")"
	}
	return e.Schedule
}

// demoRun runs one variant to its end, moving its row on the board, or
// printing a line per unit when the board does not draw.
func demoRun(ctx context.Context, store *storage.Store, name string, row *progress.Row, drawing bool,
	log *slog.Logger, logFile io.Writer, out io.Writer) (demoRunResult, error) {
	run, err := pipeline.LoadRun(ctx, store, name)
	if err != nil {
		return demoRunResult{}, err
	}
	res := demoRunResult{name: name, schedule: demoLabel(&run.Spec)}
	rt, err := pipeline.NewRuntime(ctx, store, &run.Spec, pipeline.RuntimeOptions{Log: log, Run: name})
	if err != nil {
		return res, err
	}
	defer rt.Close()
	r := &pipeline.Runner{Planner: pipeline.Planner{Store: store, Run: name, Spec: &run.Spec}, Runtime: rt, Log: log, Out: logFile}
	start := time.Now()
	lastTest := "no test yet"
	err = r.RunToEnd(ctx, func(s *pipeline.StepResult) {
		d := s.Plan.Decision
		spent := int64(d.Signals["rollouts_spent"])
		res.rollouts = spent
		if s.Plan.Done() {
			res.reason = d.Reason
			return
		}
		if d.Kind == schedule.KindTest && s.Result.Manifest != nil {
			if v, ok := s.Result.Manifest.Summary["best_score"].(float64); ok {
				res.tests++
				res.finalTest = v
				lastTest = fmt.Sprintf("test %.3f at %s", v, d.Position)
			}
		}
		// The spend shown is that before this unit; the unit's own
		// rollouts count once its last stage commits.
		if s.Result.Manifest != nil && (d.Kind == schedule.KindWeight || d.Kind == schedule.KindHarness) {
			if ep, ok := s.Result.Manifest.Summary["episodes"].(float64); ok && (s.Plan.Stage == pipeline.StageRollout || s.Plan.Stage == pipeline.StageEvaluate) {
				spent += int64(ep)
			}
		}
		status := fmt.Sprintf("%s %s · %s", s.Plan.Stage, d.Position, lastTest)
		row.Set(spent, status)
		if !drawing && d.Kind == schedule.KindTest {
			fmt.Fprintf(out, "%-20s %6d rollouts  %s\n", name, spent, lastTest)
		}
	})
	res.wall = time.Since(start)
	if err != nil {
		row.Set(res.rollouts, "failed: "+err.Error())
		var held *storage.LeaseHeldError
		if errors.As(err, &held) {
			return res, fmt.Errorf("run %s is busy (another whale holds it): %w", name, err)
		}
		return res, fmt.Errorf("run %s: %w (details in the log)", name, err)
	}
	// The table reads the committed tests, so a rerun of a finished demo
	// shows the same numbers as the run that made them.
	if res.tests, res.finalTest, err = demoTests(ctx, store, name); err != nil {
		return res, err
	}
	if res.tests > 0 {
		lastTest = fmt.Sprintf("final test %.3f", res.finalTest)
	}
	row.Done(fmt.Sprintf("done · %s", lastTest))
	if !drawing {
		fmt.Fprintf(out, "%-20s done in %s: %s\n", name, res.wall.Round(time.Second), res.reason)
	}
	return res, nil
}

// demoTests counts the run's committed tests and returns the score of the
// last one in schedule order.
func demoTests(ctx context.Context, store *storage.Store, run string) (int, float64, error) {
	ms, err := storage.ListCommitted(ctx, store, run)
	if err != nil {
		return 0, 0, fmt.Errorf("list stages of run %s: %w", run, err)
	}
	n, final := 0, 0.0
	var last schedule.Pos
	for _, m := range ms {
		p, err := schedule.ParsePosition(m.Position)
		if err != nil || m.Stage != pipeline.StageEvaluate {
			continue
		}
		if p.Section != schedule.SectionInitialTest && p.Section != schedule.SectionWeightTest && p.Section != schedule.SectionHarnessTest {
			continue
		}
		v, ok := m.Summary["best_score"].(float64)
		if !ok {
			return 0, 0, fmt.Errorf("run %s: test %s has no best_score in its summary", run, m.Dir)
		}
		if n == 0 || p.Compare(last) > 0 {
			last, final = p, v
		}
		n++
	}
	return n, final, nil
}

// discardWriter swallows the output of the commands the demo reuses.
type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
