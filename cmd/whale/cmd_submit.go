package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/pipeline/slurmsubmit"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/scheduler/slurm"
	"github.com/whalerun/whale/storage"
)

// ---- submit slurm

// newScheduler is the Slurm the commands talk to; tests replace it.
var newScheduler = func() slurm.Scheduler { return &slurm.Client{} }

type submitOptions struct {
	Root, Run string
	CacheDir  string
	// Whale is the binary the jobs run; default this one.
	Whale     string
	Chain     int
	DryRun    bool
	LogDir    string
	Resources slurmsubmit.Resources
	// Templates is a site's copy of jobs/slurm; empty: the embedded ones.
	Templates string
}

// listFlag collects a repeated flag without splitting at commas, which
// sbatch options carry (--mail-type=END,FAIL).
type listFlag struct{ vals []string }

func (l *listFlag) Set(v string) error { l.vals = append(l.vals, v); return nil }
func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.vals, " ")
}

func submitCommand() *cli.Command {
	return &cli.Command{
		Name:   "submit",
		Usage:  "submit a run to a batch scheduler",
		Action: unknownSubcommand,
		Subcommands: []*cli.Command{{
			Name:      "slurm",
			Usage:     "submit the run's next stage as Slurm jobs that go on submitting until the schedule ends",
			ArgsUsage: "RUN",
			Description: `The planner's next stage becomes one sbatch job running 'whale step RUN'; a
rollout with N > 1 shards becomes an array of N tasks ('whale stage rollout
--at POS --shard I/N') and a commit job after it (--dependency=afterok,
'whale stage --finalize'). The last job then runs 'whale submit slurm RUN'
again, so the run goes on by itself until its schedule ends; a failed job
submits nothing after it, and 'whale submit slurm RUN' again resumes from
the committed artifacts. Jobs are --requeue: stages are idempotent.

--chain K submits K stages ahead as a dependency chain: the next stage,
then K-1 'whale step' jobs, each afterok on the previous. Later stages'
positions are unknown until earlier ones commit, so each of those jobs plans
when it starts (and runs a sharded rollout's shards in turn, in one job).

Nothing is submitted while a job of the run recorded in its ledger is still
queued or running, or while another process holds the run's lease. Job ids
go into the run's ledger; 'whale status RUN' shows them.

Scripts carry the root URL, the run name and the whale binary's path, never
credentials: sbatch hands the submitting environment to the job
(--export=ALL, Slurm's default), which is how AWS_* and the like reach it.
A --root with user info, a fragment, a query that does not parse strictly,
or a query parameter other than the bucket's configuration (endpoint,
region, use_path_style, prefix, ...) is refused.
Resources apply to every job of the submission (the commit job drops
GPUs, CPUs and memory).`,
			Flags: []cli.Flag{
				rootFlag(),
				&cli.IntFlag{Name: "chain", Value: 1, Usage: "submit `K` stages ahead as a dependency chain"},
				&cli.BoolFlag{Name: "dry-run", Usage: "print the scripts (with placeholder job ids) and submit nothing"},
				&cli.StringFlag{Name: "whale", Usage: "`PATH` of the whale binary on the compute nodes (default: this binary)"},
				&cli.StringFlag{Name: "log-dir", Usage: "`DIR` for the jobs' logs (default: Slurm's, slurm-%j.out in the submitting directory)"},
				&cli.StringFlag{Name: "templates", Usage: "`DIR` with a site's copy of jobs/slurm/*.tmpl"},
				&cli.StringFlag{Name: "cache", Usage: "local cache `DIR` for the jobs' retrieval indexes"},
				&cli.StringFlag{Name: "partition", Usage: "sbatch --partition"},
				&cli.StringFlag{Name: "account", Usage: "sbatch --account"},
				&cli.StringFlag{Name: "qos", Usage: "sbatch --qos"},
				&cli.StringFlag{Name: "time", Usage: "wall-clock limit of each job: `LIMIT` as 90m, 2h30m, MM, HH:MM:SS or D-HH:MM:SS"},
				&cli.IntFlag{Name: "gpus", Usage: "GPUs per job (--gres=gpu:N)"},
				&cli.StringFlag{Name: "gpu-type", Usage: "GPU type in --gres=gpu:TYPE:N"},
				&cli.IntFlag{Name: "cpus", Usage: "sbatch --cpus-per-task"},
				&cli.StringFlag{Name: "mem", Usage: "sbatch --mem, e.g. 16G"},
				&cli.IntFlag{Name: "max-parallel", Usage: "at most `N` shards of an array at once"},
				&cli.GenericFlag{Name: "sbatch-extra", Value: &listFlag{}, Usage: "a further sbatch `OPTION`, e.g. --constraint=a100 (repeatable)"},
				&cli.GenericFlag{Name: "prologue", Value: &listFlag{}, Usage: "a shell `LINE` run before whale in each job, e.g. 'module load cuda' (repeatable)"},
			},
			Action: action(func(c *cli.Context, args []string) error {
				run, err := oneRun(args)
				if err != nil {
					return err
				}
				o := submitOptions{Root: c.String("root"), Run: run, CacheDir: c.String("cache"), Whale: c.String("whale"),
					Chain: c.Int("chain"), DryRun: c.Bool("dry-run"), LogDir: c.String("log-dir"), Templates: c.String("templates")}
				if o.Chain < 1 {
					return usagef("--chain %d: want at least 1", o.Chain)
				}
				r := &o.Resources
				r.Partition, r.Account, r.QOS = c.String("partition"), c.String("account"), c.String("qos")
				r.GPUs, r.GPUType, r.CPUs, r.Mem = c.Int("gpus"), c.String("gpu-type"), c.Int("cpus"), c.String("mem")
				r.MaxParallel = c.Int("max-parallel")
				r.Extra = c.Generic("sbatch-extra").(*listFlag).vals
				r.Prologue = c.Generic("prologue").(*listFlag).vals
				if t := c.String("time"); t != "" {
					if r.Time, err = parseTimeLimit(t); err != nil {
						return usageError{err}
					}
				}
				return runSubmitSlurm(c.Context, o, c.App.Writer)
			}),
		}},
	}
}

// parseTimeLimit reads --time as the experiment file's slurm times: a Go
// duration (90m) or Slurm's minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
// D-HH:MM:SS.
func parseTimeLimit(s string) (time.Duration, error) {
	d, err := spec.ParseTimeLimit(s)
	if err != nil {
		return 0, fmt.Errorf("--%w", err)
	}
	return d, nil
}

func runSubmitSlurm(ctx context.Context, o submitOptions, out io.Writer) error {
	whale := o.Whale
	if whale == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the whale binary for the jobs (pass --whale PATH): %w", err)
		}
		whale = exe
	}
	whale, err := filepath.Abs(whale)
	if err != nil {
		return usagef("--whale %s: %v", o.Whale, err)
	}
	logDir := o.LogDir
	if logDir != "" {
		if logDir, err = filepath.Abs(logDir); err != nil {
			return usagef("--log-dir %s: %v", o.LogDir, err)
		}
	}
	renderer := slurm.DefaultRenderer()
	if o.Templates != "" {
		if renderer, err = slurm.NewRenderer(os.DirFS(o.Templates)); err != nil {
			return usagef("--templates %s: %v", o.Templates, err)
		}
	}
	if o.Root == "" {
		return usagef("no bucket given: pass --root URL or set WHALE_ROOT")
	}
	if err := slurmsubmit.CheckRoot(o.Root); err != nil {
		return usageError{fmt.Errorf("--%w", err)}
	}
	store, pl, err := openPlanner(ctx, runOptions{Root: o.Root, Run: o.Run})
	if err != nil {
		return err
	}
	defer store.Close()
	sub := &slurmsubmit.Submitter{
		Planner: pl, Scheduler: newScheduler(), Renderer: renderer,
		Options: slurmsubmit.Options{Root: o.Root, Whale: whale, Chain: o.Chain, LogDir: logDir, CacheDir: o.CacheDir, Resources: o.Resources},
		Self:    os.Getenv("SLURM_JOB_ID"),
		DryRun:  o.DryRun,
	}
	res, err := sub.Submit(ctx)
	if res != nil && res.Plan != nil && res.Plan.Done() {
		fmt.Fprintf(out, "run %s is done: %s\n", o.Run, res.Plan.Decision.Reason)
		return nil
	}
	if res != nil && res.Held != "" {
		// Like a busy `whale step`: someone else drives the run.
		fmt.Fprintf(out, "nothing submitted: %s\n", res.Held)
		return err
	}
	if res != nil {
		for _, j := range res.Jobs {
			if o.DryRun {
				fmt.Fprintf(out, "# ---- %s job %s (placeholder id %s)\n%s", j.Role, j.Name, j.ID, j.Script)
				continue
			}
			fmt.Fprintf(out, "submitted %s job %s (%s)\n", j.Role, j.ID, j.Name)
		}
	}
	if err != nil {
		return err
	}
	if !o.DryRun {
		p := res.Plan
		fmt.Fprintf(out, "run %s: %s at %s (%d shards), chain of %d\n", o.Run, p.Stage, p.Decision.Position, max(p.Spec.Shards, 1), o.Chain)
	}
	return nil
}

// printSlurmJobs adds the run's Slurm jobs to `whale status`, when its
// ledger records any: what squeue still knows of them (there is no sacct
// without accounting; Slurm forgets a job MinJobAge after it ends, and
// then the committed stages are the truth).
func printSlurmJobs(ctx context.Context, store *storage.Store, run string, tw *tabwriter.Writer) {
	ids, by, err := slurmsubmit.LedgerJobs(ctx, store, run)
	if err != nil {
		fmt.Fprintf(tw, "slurm jobs\tunreadable ledger: %v\n", err)
		return
	}
	if len(ids) == 0 {
		return
	}
	jobs, err := newScheduler().Jobs(ctx, slurm.Filter{IDs: ids, User: "*"})
	if err != nil {
		fmt.Fprintf(tw, "slurm jobs\t%d recorded; squeue: %v\n", len(ids), err)
		return
	}
	known := map[string][]slurm.Job{}
	for _, j := range jobs {
		id := j.ID
		if j.ArrayJobID != "" {
			id = j.ArrayJobID
		}
		known[id] = append(known[id], j)
	}
	// The newest submissions matter most; older ones are mostly forgotten.
	const show = 8
	start := max(len(ids)-show, 0)
	fmt.Fprintf(tw, "slurm jobs\t%d recorded", len(ids))
	if start > 0 {
		fmt.Fprintf(tw, " (the last %d shown)", show)
	}
	fmt.Fprintln(tw)
	for _, id := range ids[start:] {
		e := by[id]
		state := "ended (no longer known to Slurm)"
		if js := known[id]; len(js) > 0 {
			state = summarizeStates(js)
		}
		fmt.Fprintf(tw, "  job %s\t%s %s: %s\n", id, e.Position, e.Stage, state)
	}
}

// summarizeStates is "RUNNING" for one job, "3 COMPLETED, 1 RUNNING" for
// an array's tasks.
func summarizeStates(js []slurm.Job) string {
	if len(js) == 1 {
		j := js[0]
		s := j.Name + " " + j.State
		if j.Reason != "" && j.Reason != "None" {
			s += " (" + j.Reason + ")"
		}
		return s
	}
	counts := map[string]int{}
	for _, j := range js {
		counts[j.State]++
	}
	var parts []string
	for _, st := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
	}
	return js[0].Name + " tasks " + strings.Join(parts, ", ")
}
