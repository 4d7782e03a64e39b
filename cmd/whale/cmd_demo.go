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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/domains/searchdemo"
	"github.com/whalerun/whale/internal/progress"
	"github.com/whalerun/whale/jobs"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/report"
	"github.com/whalerun/whale/storage"
)

type demoOptions struct {
	Dir string
	// World is the name of the demo world (demoWorlds); "" is the first.
	World string
	// Budget overrides budget.rollouts of every variant (0: the file's).
	Budget int64
	// Quick shrinks the experiment to seconds, for tests and a first look.
	Quick bool
	// Seeds are the spec seeds each schedule runs with (none: 1, 2, 3).
	Seeds []int64
	// AllSchedules adds stagewise and FST to the four default schedules.
	AllSchedules bool
	// Parallel is how many runs go at once (0: GOMAXPROCS).
	Parallel int
}

// demoDataSeed orders the imported task files. It is fixed, not a run's
// seed: every run, whatever its seed, sees the same split and the same
// search subset (the first search_set_size tasks of the file), so that
// seeds vary only sampling, the training order and the proposer.
const demoDataSeed = 1

// demoDefaultSeeds is how many seeds each schedule runs by default.
const demoDefaultSeeds = 3

// demoVariant is one schedule of the comparison; everything else is the
// world's example file. A run is named <world prefix>-<name>-s<seed>.
type demoVariant struct {
	name, schedule, mode string
}

var demoVariants = []demoVariant{
	{"whale-fixed", spec.ScheduleWhale, spec.SwitchFixed},
	{"whale-patience", spec.ScheduleWhale, spec.SwitchPatience},
	{"weights-only", spec.ScheduleWeightsOnly, spec.SwitchFixed},
	{"harness-only", spec.ScheduleHarnessOnly, spec.SwitchFixed},
}

// demoExtraVariants run with --all-schedules: the paper's other baselines.
var demoExtraVariants = []demoVariant{
	{"stagewise", spec.ScheduleStagewise, spec.SwitchFixed},
	{"fst", spec.ScheduleFST, spec.SwitchFixed},
}

// demoWorld is one world `whale demo` can run: its example experiment,
// its committed starting checkpoint, and the inputs it writes and stores
// in the bucket. Adding a world is one entry here.
type demoWorld struct {
	name    string // --world
	prefix  string // of run names and the files under DIR/inputs
	about   string // for the help text
	example string // under jobs.Examples
	// checkpoint is the committed starting checkpoint's bytes.
	checkpoint func() []byte
	// prepare writes the world's inputs under inputs, imports them into
	// root (and builds what else the experiment names) and says what it
	// stored. It is idempotent: a rerun stores nothing new.
	prepare func(ctx context.Context, root, inputs string, exp *spec.Experiment) (string, error)
	// stagewise is the length of stagewise's harness stage: the iterations
	// whale (fixed) ran at the shipped budget, so that both split the
	// rollouts between the levers alike; quickStagewise for --quick.
	stagewise, quickStagewise int
	// pretrain makes the starting checkpoint from scratch (whale local
	// pretrain); zero options take the world's defaults.
	pretrain func(context.Context, local.PretrainOptions) (*local.Model, error)
	// defaultSeed is the seed pretrain and files use by default.
	defaultSeed uint64
	// files writes the world's task files (and corpus) for --tasks-out.
	files func(dir string, seed uint64) ([]string, error)
}

var demoWorlds = []demoWorld{
	{
		name: "search", prefix: "searchdemo", example: "examples/searchdemo.yaml",
		about:      "search QA about invented people whose facts live only in an embedded corpus, searched with the native search tool over a BM25 index",
		checkpoint: searchdemo.PretrainedCheckpoint, prepare: prepareSearchDemo,
		stagewise: 3, quickStagewise: 2, // 1 round of 3 at 4000 rollouts (seeds 1-3); 1 round of 2 quick
		pretrain: searchdemo.Pretrain, defaultSeed: searchdemo.DefaultPretrain.Seed,
		files: func(dir string, seed uint64) ([]string, error) {
			tasks, corpus, err := searchdemo.NewWorld().WriteFiles(dir, seed)
			return append(tasks, corpus), err
		},
	},
	{
		name: "arithmetic", prefix: "demo", example: "examples/demo.yaml",
		about:      "single-digit arithmetic, where the only harness lever is the answer format, which the weights absorb",
		checkpoint: demo.PretrainedCheckpoint, prepare: prepareArithmeticDemo,
		stagewise: 15, quickStagewise: 4, // 5 rounds of 3 at 8000 rollouts (seeds 1-3); 2 rounds of 2 quick
		pretrain: demo.Pretrain, defaultSeed: demo.DefaultPretrain.Seed, files: demo.WriteDatasets,
	},
}

// lookupDemoWorld returns the world called name ("" is the first).
func lookupDemoWorld(name string) (demoWorld, error) {
	if name == "" {
		return demoWorlds[0], nil
	}
	var names []string
	for _, w := range demoWorlds {
		if w.name == name {
			return w, nil
		}
		names = append(names, w.name)
	}
	return demoWorld{}, fmt.Errorf("--world %q: the demo worlds are %s", name, strings.Join(names, ", "))
}

func (w demoWorld) runName(v demoVariant, seed int64) string {
	return demoRunName(w.prefix+"-"+v.name, seed)
}

// prepareArithmeticDemo imports the arithmetic tasks.
func prepareArithmeticDemo(ctx context.Context, root, inputs string, exp *spec.Experiment) (string, error) {
	paths, err := demo.WriteDatasets(inputs, demoDataSeed)
	if err != nil {
		return "", err
	}
	for i, split := range []string{demo.SplitTrain, demo.SplitSearch, demo.SplitTest} {
		if err := runImport(ctx, importOptions{Root: root, File: paths[i], Name: "demo-" + split}, io.Discard); err != nil {
			return "", fmt.Errorf("import %s: %w", paths[i], err)
		}
	}
	return fmt.Sprintf("tasks: %d train, %d search, %d test (%s)",
		demo.SplitSize(demo.SplitTrain), min(exp.Harness.SearchSetSize, demo.SplitSize(demo.SplitSearch)), demo.SplitSize(demo.SplitTest), inputs), nil
}

// prepareSearchDemo imports the search demo's tasks and builds the BM25
// index of its corpus in the bucket, as `whale data import` and `whale
// index build` do.
func prepareSearchDemo(ctx context.Context, root, inputs string, exp *spec.Experiment) (string, error) {
	w := searchdemo.NewWorld()
	paths, corpus, err := w.WriteFiles(inputs, demoDataSeed)
	if err != nil {
		return "", err
	}
	var n [3]int
	for i, split := range []string{searchdemo.SplitTrain, searchdemo.SplitSearch, searchdemo.SplitTest} {
		if err := runImport(ctx, importOptions{Root: root, File: paths[i], Name: "searchdemo-" + split}, io.Discard); err != nil {
			return "", fmt.Errorf("import %s: %w", paths[i], err)
		}
		ts, err := w.Tasks(split)
		if err != nil {
			return "", err
		}
		n[i] = len(ts)
	}
	name := strings.TrimPrefix(exp.Tools.Retriever, spec.RetrieverIndexPrefix)
	if err := runIndexBuild(ctx, indexBuildOptions{Root: root, Corpus: corpus, Name: name}, io.Discard); err != nil {
		return "", fmt.Errorf("index %s: %w", corpus, err)
	}
	return fmt.Sprintf("tasks: %d train, %d search, %d test; index %s of %d passages (%s)",
		n[0], min(exp.Harness.SearchSetSize, n[1]), n[2], name, len(w.Corpus()), inputs), nil
}

// demoRunName names one seed of a variant.
func demoRunName(variant string, seed int64) string { return fmt.Sprintf("%s-s%d", variant, seed) }

// parseSeeds reads --seeds: a count N (seeds 1..N) or a comma-separated
// list of seeds ("1,4,9"; one seed alone is written "7,").
func parseSeeds(v string) ([]int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return seedRange(demoDefaultSeeds), nil
	}
	if !strings.Contains(v, ",") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return nil, fmt.Errorf("--seeds %q: want a count from 1 to 100, or a comma-separated list of seeds such as 1,4,9", v)
		}
		return seedRange(n), nil
	}
	var out []int64
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--seeds %q: %q is not a seed: want positive integers separated by commas", v, f)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--seeds %q: seed %d is listed twice", v, n)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--seeds %q: no seed given", v)
	}
	return out, nil
}

func seedRange(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run a complete WHALE comparison on the built-in model: no GPU, no network, no keys",
		Description: `Creates a local bucket in --dir, stores the tasks of a demo world (train,
search and held-out test splits; --world: search, the default, is search QA
about invented people whose facts live only in an embedded corpus, searched
with the native search tool over a BM25 index built in the bucket;
arithmetic is single-digit arithmetic), writes the committed starting
checkpoint and the experiment (jobs/examples/searchdemo.yaml or demo.yaml)
next to them, and runs the experiment under four schedules at the same
rollout budget:
whale with the fixed switch, whale with the patience switch, weights-only
and harness-only (--all-schedules adds stagewise and FST), each once per
seed (--seeds: 3 by default). The seed changes sampling, the order of the
training tasks and the proposer's choices; the data split stays the same.
Every run samples from the built-in model, fine-tunes it on CPU, searches
harnesses with an offline proposer (archive in the search world, mutate in
the arithmetic one) and scores mean@8 on the test split after each phase.
Then it writes an HTML report to DIR/report and prints each schedule's
mean and spread over seeds: peak and final test mean@8,
the score at equal spend (the smallest spend any run reached) and the
rollouts spent.

Logs go to DIR/logs/demo.log. Running it again resumes or, when finished,
changes nothing: every stage is committed once.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "demo-bucket", Usage: "`DIR` for the local bucket, the inputs, the logs and the report"},
			&cli.StringFlag{Name: "world", Value: demoWorlds[0].name, Usage: "the demo `WORLD`: " + demoWorldNames()},
			&cli.Int64Flag{Name: "budget", Usage: "budget.rollouts of every run (default: the example's)"},
			&cli.BoolFlag{Name: "quick", Usage: "a small version that runs in seconds (smaller batches, search and test sets)"},
			&cli.StringFlag{Name: "seeds", Value: strconv.Itoa(demoDefaultSeeds), Usage: "`N` seeds (1..N) per schedule, or a comma-separated list of seeds (1,4,9; one seed alone: 7,)"},
			&cli.BoolFlag{Name: "all-schedules", Usage: "also run stagewise and FST"},
			&cli.IntFlag{Name: "parallel", Usage: "how many runs go at once (default: GOMAXPROCS, the usable cores)"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 0 {
				return usagef("demo takes no arguments, got %q", args)
			}
			if c.Int64("budget") < 0 {
				return usagef("--budget %d: want a positive number of rollouts", c.Int64("budget"))
			}
			seeds, err := parseSeeds(c.String("seeds"))
			if err != nil {
				return usageError{err}
			}
			if c.Int("parallel") < 0 {
				return usagef("--parallel %d: want a positive number of runs", c.Int("parallel"))
			}
			if _, err := lookupDemoWorld(c.String("world")); err != nil {
				return usageError{err}
			}
			return runDemo(c.Context, demoOptions{Dir: c.String("dir"), World: c.String("world"), Budget: c.Int64("budget"), Quick: c.Bool("quick"),
				Seeds: seeds, AllSchedules: c.Bool("all-schedules"), Parallel: c.Int("parallel")}, c.App.Writer)
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

	world, err := lookupDemoWorld(o.World)
	if err != nil {
		return usageError{err}
	}
	exp, yamlPath, err := demoExperiment(world, inputs, o)
	if err != nil {
		return err
	}
	stored, err := world.prepare(ctx, root, inputs, exp)
	if err != nil {
		return err
	}
	quiet := io.Discard
	fmt.Fprintf(out, "world %s: %s\n", world.name, stored)
	seeds := o.Seeds
	if len(seeds) == 0 {
		seeds = seedRange(demoDefaultSeeds)
	}
	variants := demoVariants
	if o.AllSchedules {
		variants = append(slices.Clone(demoVariants), demoExtraVariants...)
	}
	var names []string
	var groups []report.GroupSpec
	for _, v := range variants {
		g := report.GroupSpec{Name: world.prefix + "-" + v.name}
		for _, seed := range seeds {
			e := exp.Clone()
			e.Name, e.Schedule, e.Switch.Mode, e.Seed = world.runName(v, seed), v.schedule, v.mode, seed
			if v.schedule == spec.ScheduleStagewise {
				// Stagewise needs the length of its harness stage: the
				// iterations whale (fixed) runs at this budget, so that
				// both split the rollouts between the levers alike.
				e.Budget.HarnessIterations = world.stagewise
				if o.Quick {
					e.Budget.HarnessIterations = world.quickStagewise
				}
			}
			e.Description = fmt.Sprintf("whale demo: %s, seed %d", demoLabel(e), seed)
			if err := initExperiment(ctx, root, e, yamlPath, quiet); err != nil {
				return fmt.Errorf("init %s: %w", e.Name, err)
			}
			names = append(names, e.Name)
			g.Runs = append(g.Runs, e.Name)
		}
		groups = append(groups, g)
	}
	parallel := o.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	parallel = min(parallel, len(names))
	fmt.Fprintf(out, "runs: %d schedules × %d seeds (%s) at budget.rollouts %d each, %d at a time; logs in %s\n\n",
		len(variants), len(seeds), joinSeeds(seeds), exp.Budget.Rollouts, parallel, filepath.Join(logs, "demo.log"))

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
	// Runs are independent (each has its own folder, lease and model
	// server), so up to parallel of them go at once; the model's batches
	// and gradient sums are the same whatever runs beside them, so the
	// numbers do not depend on it. The first failure stops the others.
	if err := demoRunAll(ctx, root, names, rows, parallel, board.Drawing(), logFile, &lockedWriter{w: out}); err != nil {
		board.Close()
		return err
	}
	board.Close()

	fmt.Fprintln(out)
	d, err := writeReport(ctx, reportOptions{Root: root, Runs: names, Out: filepath.Join(dir, "report"), Groups: groups}, quiet)
	if err != nil {
		return err
	}
	// The tables are the report's own reading of the artifacts, so a rerun
	// of a finished demo shows the numbers of the runs that made them.
	if err := demoRunTable(out, d, exp.Eval.K); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := demoCompareTable(out, d.Comparison, exp.Eval.K); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "\n%s\n", filepath.Join(dir, "report", report.IndexName))
	return err
}

func joinSeeds(seeds []int64) string {
	s := make([]string, len(seeds))
	for i, v := range seeds {
		s[i] = strconv.FormatInt(v, 10)
	}
	return strings.Join(s, ", ")
}

// lockedWriter serialises the lines of runs that go at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// demoRunAll runs names[i] on rows[i], parallel at a time, in order.
func demoRunAll(ctx context.Context, root string, names []string, rows []*progress.Row, parallel int, drawing bool, logFile, out io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i, n := range names {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := demoRun(ctx, root, n, rows[i], drawing, logFile, out); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// demoRunTable prints one line per run.
func demoRunTable(out io.Writer, d *report.Data, k int) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tschedule\tseed\trollouts\ttests\tfinal mean@%d\tpeak (at)\twall\n", k)
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", r.Name, schedule, r.Seed, r.Rollouts, len(r.Tests), final, peak, wall)
	}
	return tw.Flush()
}

// demoCompareTable prints each schedule's mean ± std [min–max] over seeds,
// and the report's note on reading them.
func demoCompareTable(out io.Writer, c *report.Comparison, k int) error {
	if c == nil {
		return nil
	}
	st := func(s report.Stat, format string) string {
		if s.N == 0 {
			return "-"
		}
		v := fmt.Sprintf(format, s.Mean)
		if s.N > 1 {
			v += fmt.Sprintf(" ± "+format+" ["+format+"–"+format+"]", s.Std, s.Min, s.Max)
		}
		return v
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "schedule\tseeds\tpeak mean@%d\tfinal mean@%d\tat %d rollouts\trollouts spent\n", k, k, c.EqualSpend)
	for _, g := range c.Groups {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", g.Label, len(g.Runs), st(g.Peak, "%.3f"), st(g.Final, "%.3f"), st(g.AtEqualSpend, "%.3f"), st(g.Rollouts, "%.0f"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\n%s\n", c.Note)
	return err
}

// demoExperiment is the world's shipped example with the checkpoint
// written next to it, and the --quick and --budget changes; it returns
// the experiment and the path of the file written.
func demoExperiment(w demoWorld, inputs string, o demoOptions) (*spec.Experiment, string, error) {
	src, err := jobs.Examples.ReadFile(w.example)
	if err != nil {
		return nil, "", err
	}
	yamlPath := filepath.Join(inputs, filepath.Base(w.example))
	exp, err := spec.Parse(yamlPath, src)
	if err != nil {
		return nil, "", err
	}
	// The file names the checkpoint next to it.
	ckpt := filepath.Join(inputs, filepath.Base(exp.Model.Checkpoint))
	for path, data := range map[string][]byte{yamlPath: src, ckpt: w.checkpoint()} {
		if err := writeIfChanged(path, data); err != nil {
			return nil, "", err
		}
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
	return exp, yamlPath, nil
}

func demoWorldNames() string {
	var parts []string
	for _, w := range demoWorlds {
		parts = append(parts, w.name+" ("+w.about+")")
	}
	return strings.Join(parts, "; ")
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
