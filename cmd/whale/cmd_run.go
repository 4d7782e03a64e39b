package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// ---- plan, step, run, stage

type runOptions struct {
	Root     string
	Run      string
	JSON     bool
	CacheDir string
	// For stage:
	Stage, At string
	Force     bool
	// Shard is "I/N" (run one shard of a sharded stage); Finalize commits
	// a sharded stage whose shards are done. Both are what Slurm jobs run.
	Shard    string
	Finalize bool
	// LeaseTTL is how long the run's lease lasts unrenewed (0: the
	// default); Wait makes run wait for a busy run's lease.
	LeaseTTL time.Duration
	Wait     bool
}

func runFlags() []cli.Flag {
	return []cli.Flag{
		rootFlag(),
		&cli.StringFlag{Name: "cache", Usage: "local cache `DIR` for downloaded retrieval indexes (default: the user cache dir)"},
	}
}

// leaseFlag is the lease's TTL, for the commands that take the lease.
func leaseFlag() cli.Flag {
	return &cli.DurationFlag{Name: "lease-ttl", Value: pipeline.LeaseTTL, Usage: "how long the run's lease lasts without renewal (`DURATION`); " +
		"a holder that crashed on this host, or whose Slurm job ended, is taken over at once, others when their lease expires"}
}

// leaseTTL reads --lease-ttl.
func leaseTTL(c *cli.Context) (time.Duration, error) {
	d := c.Duration("lease-ttl")
	if d < 3*time.Second {
		return 0, usagef("--lease-ttl %s: want at least 3s (the lease is renewed every third of it)", d)
	}
	return d, nil
}

func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "print the run's next stage and the signals that decided it (reads artifacts only)",
		ArgsUsage: "RUN",
		Flags:     append(runFlags(), &cli.BoolFlag{Name: "json", Usage: "print the decision as JSON"}),
		Action: action(func(c *cli.Context, args []string) error {
			run, err := oneRun(args)
			if err != nil {
				return err
			}
			return runPlan(c.Context, runOptions{Root: c.String("root"), Run: run, JSON: c.Bool("json")}, c.App.Writer)
		}),
	}
}

func stepCommand() *cli.Command {
	return &cli.Command{
		Name:      "step",
		Usage:     "run exactly one stage of the run under its lease (cron-friendly)",
		ArgsUsage: "RUN",
		Description: `When another live process holds the run's lease, step prints one line
naming the holder and exits 0, so overlapping cron ticks are harmless; a
real failure exits non-zero. A lease whose holder crashed on this host (or
whose Slurm job has ended) is taken over at once and the takeover recorded
in the ledger.`,
		Flags: append(runFlags(), leaseFlag()),
		Action: action(func(c *cli.Context, args []string) error {
			run, err := oneRun(args)
			if err != nil {
				return err
			}
			ttl, err := leaseTTL(c)
			if err != nil {
				return err
			}
			return runStep(c.Context, runOptions{Root: c.String("root"), Run: run, CacheDir: c.String("cache"), LeaseTTL: ttl}, c.App.Writer, false)
		}),
	}
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run the run's stages one after another until its schedule ends",
		ArgsUsage: "RUN",
		Description: `Each stage runs under the run's lease. When another live process holds
it, run exits 4 (busy) at once, or with --wait waits until the lease is
free. A lease whose holder crashed on this host (or whose Slurm job has
ended) is taken over at once and the takeover recorded in the ledger; a
holder on another host is honoured until its lease expires.`,
		Flags: append(runFlags(), leaseFlag(),
			&cli.BoolFlag{Name: "wait", Usage: "wait while another process holds the run's lease instead of exiting 4"}),
		Action: action(func(c *cli.Context, args []string) error {
			run, err := oneRun(args)
			if err != nil {
				return err
			}
			ttl, err := leaseTTL(c)
			if err != nil {
				return err
			}
			return runStep(c.Context, runOptions{Root: c.String("root"), Run: run, CacheDir: c.String("cache"), LeaseTTL: ttl,
				Wait: c.Bool("wait")}, c.App.Writer, true)
		}),
	}
}

func stageCommand() *cli.Command {
	return &cli.Command{
		Name:      "stage",
		Usage:     "rerun one stage of a run at a position it has reached",
		ArgsUsage: "NAME RUN",
		Description: `NAME is rollout, filter, finetune, propose or evaluate; --at is a position
such as r001-w02. A committed stage with the same inputs is a no-op; with other
inputs it is a conflict (exit 3) unless --force, which writes a new attempt
and keeps the old one (until 'whale gc' deletes it).`,
		Flags: append(runFlags(),
			&cli.StringFlag{Name: "at", Required: true, Usage: "`POSITION` of the stage, e.g. r001-w02"},
			&cli.BoolFlag{Name: "force", Usage: "run again as a new attempt even if committed"},
			&cli.StringFlag{Name: "shard", Usage: "run only shard `I/N` of a sharded stage (a Slurm array task), without the lease; it commits the stage only when it is the last part"},
			&cli.BoolFlag{Name: "finalize", Usage: "commit a sharded stage whose shards are all done (the job after a Slurm array); runs no shard"},
			leaseFlag()),
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 2 {
				return usagef("want a stage name and a run, got %d arguments", len(args))
			}
			ttl, err := leaseTTL(c)
			if err != nil {
				return err
			}
			return runStageCmd(c.Context, runOptions{Root: c.String("root"), Stage: args[0], Run: args[1], At: c.String("at"),
				Force: c.Bool("force"), CacheDir: c.String("cache"), Shard: c.String("shard"), Finalize: c.Bool("finalize"), LeaseTTL: ttl}, c.App.Writer)
		}),
	}
}

func oneRun(args []string) (string, error) {
	if len(args) != 1 {
		return "", usagef("want exactly one run name, got %d arguments", len(args))
	}
	if err := storage.CheckRun(args[0]); err != nil {
		return "", err
	}
	return args[0], nil
}

// openPlanner opens the root and reads the run's frozen spec. The files
// outside the bucket that init recorded (a checkpoint) must still hold
// what they held then: a changed one is a conflict naming its path.
func openPlanner(ctx context.Context, o runOptions) (*storage.Store, *pipeline.Planner, error) {
	store, run, err := openRun(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	return store, &pipeline.Planner{Store: store, Run: o.Run, Spec: &run.Spec}, nil
}

// openRun opens the root, reads the run and checks its inputs.
func openRun(ctx context.Context, o runOptions) (*storage.Store, *spec.Run, error) {
	store, err := openRoot(ctx, o.Root)
	if err != nil {
		return nil, nil, err
	}
	run, err := readRun(ctx, store, o.Run)
	if err == nil {
		err = run.CheckInputs()
	}
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return store, run, nil
}

func runPlan(ctx context.Context, o runOptions, out io.Writer) error {
	store, pl, err := openPlanner(ctx, o)
	if err != nil {
		return err
	}
	defer store.Close()
	p, err := pl.Plan(ctx)
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(planJSON(p))
	}
	printPlan(out, p)
	return nil
}

func planJSON(p *pipeline.Plan) map[string]any {
	out := map[string]any{"decision": p.Decision, "done": p.Done()}
	if !p.Done() {
		out["stage"] = p.Stage
		out["model"] = p.Model
		out["harness"] = p.Harness
		out["resumed"] = p.Resumed
		out["seed"] = p.Spec.Seed
		out["shards"] = max(p.Spec.Shards, 1)
		out["config"] = p.Spec.Config
		var ins []string
		for _, in := range p.Spec.Inputs {
			ins = append(ins, in.Name+"="+in.Key)
		}
		out["inputs"] = ins
	}
	return out
}

func printPlan(out io.Writer, p *pipeline.Plan) {
	d := p.Decision
	if p.Done() {
		fmt.Fprintf(out, "done: %s\n", d.Reason)
	} else {
		fmt.Fprintf(out, "next: %s at %s (%s unit, round %d)\n", p.Stage, d.Position, d.Kind, d.Round)
		fmt.Fprintf(out, "why:  %s\n", d.Reason)
		fmt.Fprintf(out, "model: %s\nharness: %s\n", p.Model, p.Harness)
		for _, in := range p.Spec.Inputs {
			fmt.Fprintf(out, "input %s: %s\n", in.Name, in.Key)
		}
	}
	if len(d.Signals) > 0 {
		keys := slices.Sorted(maps.Keys(d.Signals))
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s=%g", k, d.Signals[k]))
		}
		fmt.Fprintf(out, "signals: %s\n", strings.Join(parts, " "))
	}
	for _, f := range p.Ignored {
		fmt.Fprintf(out, "ignored: %s (not a position of the schedule)\n", f)
	}
}

func newRunner(ctx context.Context, o runOptions, out io.Writer) (*pipeline.Runner, func(), error) {
	store, run, err := openRun(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	pl := &pipeline.Planner{Store: store, Run: o.Run, Spec: &run.Spec}
	rt, err := pipeline.NewRuntime(ctx, store, pl.Spec, pipeline.RuntimeOptions{CacheDir: o.CacheDir, Run: o.Run, Inputs: run.Inputs})
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	r := &pipeline.Runner{Planner: *pl, Runtime: rt, Out: out, Log: slog.Default(), LeaseTTL: o.LeaseTTL, Wait: o.Wait,
		CommandDir: run.Dir}
	return r, func() { rt.Close(); store.Close() }, nil
}

func runStep(ctx context.Context, o runOptions, out io.Writer, toEnd bool) error {
	r, closeAll, err := newRunner(ctx, o, out)
	if err != nil {
		return err
	}
	defer closeAll()
	report := func(res *pipeline.StepResult) {
		if res.Plan.Done() {
			fmt.Fprintf(out, "run %s is done: %s\n", o.Run, res.Plan.Decision.Reason)
			return
		}
		fmt.Fprintf(out, "%s at %s: %s\n", res.Plan.Stage, res.Plan.Decision.Position, describeResult(res.Result))
	}
	steps := 0
	if toEnd {
		err = r.RunToEnd(ctx, func(res *pipeline.StepResult) { steps++; report(res) })
	} else {
		var res *pipeline.StepResult
		if res, err = r.Step(ctx); err == nil {
			report(res)
		}
	}
	var held *storage.LeaseHeldError
	if errors.As(err, &held) {
		if toEnd {
			// Not cron: a script running `whale run X && whale report X`
			// must know that the run did not end here (exit 4).
			if steps > 0 {
				return fmt.Errorf("run %s: after %d stage(s) here, another process took the run's lease and goes on with it: %w", o.Run, steps, held)
			}
			return fmt.Errorf("run %s is busy: %w", o.Run, held)
		}
		// Cron ticks overlap: the other holder is doing the work.
		fmt.Fprintf(out, "run %s is busy: %v\n", o.Run, held)
		return nil
	}
	return err
}

func runStageCmd(ctx context.Context, o runOptions, out io.Writer) error {
	// The grammar is the planner's; say a bad position before opening the
	// root or taking the lease.
	if _, err := schedule.ParsePosition(o.At); err != nil {
		return usageError{fmt.Errorf("--at: %w", err)}
	}
	var shard, shards int
	if o.Shard != "" {
		if o.Force || o.Finalize {
			return usagef("--shard goes with neither --force nor --finalize")
		}
		var err error
		if shard, shards, err = parseShard(o.Shard); err != nil {
			return usageError{err}
		}
	}
	if o.Finalize && o.Force {
		return usagef("--finalize commits the existing attempt; it does not go with --force")
	}
	r, closeAll, err := newRunner(ctx, o, out)
	if err != nil {
		return err
	}
	defer closeAll()
	var res *pipeline.StepResult
	switch {
	case o.Finalize:
		res, err = r.FinalizeStage(ctx, o.Stage, o.At)
	case o.Shard != "":
		res, err = r.RunShard(ctx, o.Stage, o.At, shard, shards)
	default:
		res, err = r.RunStage(ctx, o.Stage, o.At, o.Force)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s at %s: %s\n", o.Stage, o.At, describeResult(res.Result))
	return nil
}

// parseShard reads "I/N", 0 ≤ I < N.
func parseShard(s string) (shard, shards int, err error) {
	i, n, ok := strings.Cut(s, "/")
	if ok {
		shard, err = strconv.Atoi(i)
		if err == nil {
			shards, err = strconv.Atoi(n)
		}
	}
	if !ok || err != nil || shard < 0 || shards < 1 || shard >= shards {
		return 0, 0, fmt.Errorf("--shard %q: want I/N with 0 <= I < N, e.g. 0/4", s)
	}
	return shard, shards, nil
}

func describeResult(r stages.Result) string {
	switch {
	case r.Skipped:
		return "already committed with the same inputs (" + r.Folder + ")"
	case r.Committed:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.Manifest.Summary)) {
			switch v := r.Manifest.Summary[k].(type) {
			case float64, bool, string:
				parts = append(parts, fmt.Sprintf("%s=%v", k, v))
			}
		}
		return fmt.Sprintf("committed %s in %s [%s]", r.Folder, r.Elapsed.Round(1e6), strings.Join(parts, " "))
	default:
		return fmt.Sprintf("shards missing: %v", r.Missing)
	}
}
