package slurmsubmit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/scheduler/slurm"
	"github.com/whalerun/whale/storage"
)

// Resources are sbatch options given as flags of `whale submit slurm`.
// Each job's options are the experiment file's slurm section for its stage
// (slurm.default with slurm.stages.<stage> over it, see spec.Slurm) with
// these laid over it; zero fields are left to the file, then to the site.
type Resources struct {
	Partition, Account, QOS string
	Time                    time.Duration
	GPUs                    int
	GPUType                 string
	CPUs                    int
	Mem                     string
	// MaxParallel throttles an array's running tasks (0: no limit).
	MaxParallel int
	// Extra are further sbatch options ("--constraint=a100"); Prologue
	// shell lines run before whale (module load, venv activation).
	Extra    []string
	Prologue []string
}

// Options say how the jobs run whale.
type Options struct {
	// Root is the bucket URL the jobs open; it must carry no credential
	// (CheckRoot).
	Root string
	// Whale is the path of the whale binary on the compute nodes.
	Whale string
	// Chain is how many stages to submit ahead (0 means 1).
	Chain int
	// LogDir, when set, is where the jobs' logs go (%x-%j.out); else
	// Slurm's default, slurm-%j.out in the submitting directory.
	LogDir string
	// CacheDir is passed on to the jobs' `whale step` and `whale stage`.
	CacheDir  string
	Resources Resources
}

// CheckRoot refuses a root URL that a job script must not carry: one from
// which redact.URL would hide something (user info, a query value other
// than a configuration parameter, a fragment, a query that does not parse
// strictly). Scripts are stored by slurmctld and shown by `scontrol write
// batch_script`; the jobs need the URL without secrets, and get
// credentials from the environment sbatch passes on.
func CheckRoot(root string) error {
	if err := redact.Check(root); err != nil {
		return fmt.Errorf("root URL %s cannot go into a job script: %v. Give credentials through the environment "+
			"(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AZURE_STORAGE_SAS_TOKEN, GOOGLE_APPLICATION_CREDENTIALS, …), "+
			"which sbatch passes on to the jobs, and keep only the bucket's configuration in the URL", redact.URL(root), err)
	}
	return nil
}

// Submitter submits a run's next stage.
type Submitter struct {
	Planner   *pipeline.Planner
	Scheduler slurm.Scheduler
	// Renderer renders the scripts; nil means slurm.DefaultRenderer().
	Renderer *slurm.Renderer
	Options
	// Self is the id of the Slurm job that calls Submit ($SLURM_JOB_ID),
	// which is still running and so not a reason to hold back.
	Self string
	// DryRun renders the scripts against placeholder job ids (a
	// slurm.Fake) and submits nothing; the ledger is left alone.
	DryRun bool
}

// Job is one submitted job.
type Job struct {
	ID     string
	Name   string
	Role   string // "shards", "commit", "stage" or "step"
	Script string
}

// Submission is what Submit did.
type Submission struct {
	Plan *pipeline.Plan
	Jobs []Job
	// Held says why nothing was submitted although the run is not done:
	// live jobs of the run, or another holder of its lease.
	Held string
}

// Job roles.
const (
	RoleShards = "shards" // the array of a sharded stage
	RoleCommit = "commit" // the commit job after it
	RoleStage  = "stage"  // the planned stage, unsharded
	RoleStep   = "step"   // a later stage of a chain, planned when it starts
)

// Submit plans the run's next stage and submits its jobs.
func (s *Submitter) Submit(ctx context.Context) (*Submission, error) {
	if s.Whale == "" || !filepath.IsAbs(s.Whale) {
		return nil, fmt.Errorf("whale binary %q: want an absolute path the compute nodes can run", s.Whale)
	}
	if s.Root == "" {
		return nil, errors.New("no root URL for the jobs")
	}
	if err := CheckRoot(s.Root); err != nil {
		return nil, err
	}
	p, err := s.Planner.Plan(ctx)
	if err != nil {
		return nil, err
	}
	sub := &Submission{Plan: p}
	if p.Done() {
		return sub, nil
	}
	sched := s.Scheduler
	if s.DryRun {
		sched = slurm.NewFake()
	} else {
		if held, err := s.held(ctx); err != nil || held != "" {
			sub.Held = held
			return sub, err
		}
	}
	r := s.Renderer
	if r == nil {
		r = slurm.DefaultRenderer()
	}
	if err := s.submit(ctx, sched, r, p, sub); err != nil {
		return sub, err
	}
	if s.DryRun {
		return sub, nil
	}
	ids := make([]string, len(sub.Jobs))
	roles := make([]string, len(sub.Jobs))
	for i, j := range sub.Jobs {
		ids[i], roles[i] = j.ID, j.Role+" "+j.ID
	}
	reason := "whale submit slurm: " + strings.Join(roles, ", ")
	if err := s.Planner.RecordJobs(ctx, p.Decision.Position, p.Stage, reason, ids); err != nil {
		// The jobs run all the same; only `whale status` loses sight of them.
		return sub, fmt.Errorf("record jobs %v of run %s in its ledger: %w", ids, s.Planner.Run, err)
	}
	return sub, nil
}

func (s *Submitter) submit(ctx context.Context, sched slurm.Scheduler, r *slurm.Renderer, p *pipeline.Plan, sub *Submission) error {
	run := s.Planner.Run
	chain := max(s.Chain, 1)
	// The last job of the chain submits the next one.
	then := func(last bool, cmd []string) ([]string, []string) {
		if !last {
			return nil, cmd
		}
		return []string{shellLine(cmd)}, s.submitArgs()
	}
	add := func(id, role string, spec slurm.Spec, script string) {
		sub.Jobs = append(sub.Jobs, Job{ID: id, Name: spec.Name, Role: role, Script: script})
	}
	prefix := JobPrefix(run)
	var after string
	if shards := max(p.Spec.Shards, 1); shards > 1 {
		pos := p.Decision.Position
		name := prefix + pos + "-" + p.Stage
		shardSpec := s.spec(p.Stage, name, s.stageArgs("--at", pos, "--shard", slurm.ShardPlaceholder+"/"+strconv.Itoa(shards), p.Stage, run), nil)
		shardSpec.Shards, shardSpec.MaxParallel = shards, s.resources(p.Stage).MaxParallel
		if s.LogDir != "" {
			shardSpec.Output = filepath.Join(s.LogDir, "%x-%A_%a.out")
		}
		pre, cmd := then(chain == 1, s.stageArgs("--at", pos, "--finalize", p.Stage, run))
		commitSpec := s.spec(p.Stage, name+"-commit", cmd, pre)
		// The commit job only writes a manifest (and maybe submits).
		commitSpec.GPUs, commitSpec.GPUType, commitSpec.CPUsPerTask, commitSpec.Mem = 0, "", 0, ""
		arrayID, commitID, err := slurm.SubmitSharded(ctx, sched, r, shardSpec, commitSpec)
		if err != nil {
			return err
		}
		commitSpec.AfterOK = []string{arrayID}
		add(arrayID, RoleShards, shardSpec, render(r, slurm.TemplateArray, shardSpec))
		add(commitID, RoleCommit, commitSpec, render(r, slurm.TemplateCommit, commitSpec))
		after = commitID
	} else {
		pre, cmd := then(chain == 1, s.stepArgs(run))
		spec := s.spec(p.Stage, prefix+p.Decision.Position+"-"+p.Stage, cmd, pre)
		id, script, err := submitOne(ctx, sched, r, spec)
		if err != nil {
			return err
		}
		add(id, RoleStage, spec, script)
		after = id
	}
	for i := 2; i <= chain; i++ {
		pre, cmd := then(i == chain, s.stepArgs(run))
		// Which stage a later step runs is not known yet: the defaults.
		spec := s.spec("", fmt.Sprintf("%snext%d-step", prefix, i-1), cmd, pre)
		spec.AfterOK = []string{after}
		id, script, err := submitOne(ctx, sched, r, spec)
		if err != nil {
			// The jobs already queued run and stop at the end of the
			// chain; `whale submit slurm` after them goes on.
			return fmt.Errorf("submit job %d of a chain of %d after job %s: %w", i, chain, after, err)
		}
		add(id, RoleStep, spec, script)
		after = id
	}
	return nil
}

func submitOne(ctx context.Context, sched slurm.Scheduler, r *slurm.Renderer, spec slurm.Spec) (id, script string, err error) {
	script, err = r.Render(slurm.TemplateStage, spec)
	if err != nil {
		return "", "", err
	}
	id, err = sched.Submit(ctx, script)
	if err != nil {
		return "", "", fmt.Errorf("submit %s: %w", spec.Name, err)
	}
	return id, script, nil
}

func render(r *slurm.Renderer, tmpl string, spec slurm.Spec) string {
	script, err := r.Render(tmpl, spec)
	if err != nil {
		return "# " + err.Error()
	}
	return script
}

// JobPrefix is how every Slurm job name of run starts.
func JobPrefix(run string) string { return "whale-" + run + "-" }

// resources are a job's sbatch options for stage: the experiment file's
// slurm.default with slurm.stages.<stage> over it, then the flags
// (Options.Resources) over both.
func (s *Submitter) resources(stage string) Resources {
	out := s.Resources
	if s.Planner == nil || s.Planner.Spec == nil {
		return out
	}
	r := s.Planner.Spec.Slurm.For(stage)
	str := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	num := func(dst *int, v int) {
		if *dst == 0 {
			*dst = v
		}
	}
	str(&out.Partition, r.Partition)
	str(&out.Account, r.Account)
	str(&out.QOS, r.QOS)
	if out.Time == 0 && r.Time != "" {
		// Validated when the spec was parsed.
		out.Time, _ = spec.ParseTimeLimit(r.Time)
	}
	num(&out.GPUs, r.GPUs)
	str(&out.GPUType, r.GPUType)
	num(&out.CPUs, r.CPUs)
	str(&out.Mem, r.Mem)
	num(&out.MaxParallel, r.MaxParallel)
	if out.Extra == nil {
		out.Extra = r.Extra
	}
	if out.Prologue == nil {
		out.Prologue = r.Prologue
	}
	return out
}

func (s *Submitter) spec(stage, name string, cmd, pre []string) slurm.Spec {
	res := s.resources(stage)
	sp := slurm.Spec{
		Name: name, Command: cmd,
		Partition: res.Partition, Account: res.Account, QOS: res.QOS,
		CPUsPerTask: res.CPUs, Mem: res.Mem, GPUs: res.GPUs, GPUType: res.GPUType, Time: res.Time,
		Requeue:  true,
		Extra:    slices.Clone(res.Extra),
		Prologue: append(slices.Clone(res.Prologue), pre...),
	}
	if s.LogDir != "" {
		sp.Output = filepath.Join(s.LogDir, "%x-%j.out")
	}
	return sp
}

// common are the flags every whale command of a job gets.
func (s *Submitter) common() []string {
	args := []string{"--root", s.Root}
	if s.CacheDir != "" {
		args = append(args, "--cache", s.CacheDir)
	}
	return args
}

func (s *Submitter) stageArgs(rest ...string) []string {
	args := append([]string{s.Whale, "stage"}, s.common()...)
	return append(args, rest...)
}

func (s *Submitter) stepArgs(run string) []string {
	args := append([]string{s.Whale, "step"}, s.common()...)
	return append(args, run)
}

// submitArgs is the `whale submit slurm` that continues the chain, with
// this submission's options.
func (s *Submitter) submitArgs() []string {
	args := append([]string{s.Whale, "submit", "slurm"}, s.common()...)
	args = append(args, "--whale", s.Whale)
	if s.Chain > 1 {
		args = append(args, "--chain", strconv.Itoa(s.Chain))
	}
	if s.LogDir != "" {
		args = append(args, "--log-dir", s.LogDir)
	}
	args = append(args, s.Resources.Args()...)
	return append(args, s.Planner.Run)
}

// Args are the `whale submit slurm` flags that give these resources, as
// --flag=value so that a value starting with "-" stays a value.
func (res Resources) Args() []string {
	var args []string
	str := func(flag, v string) {
		if v != "" {
			args = append(args, flag+"="+v)
		}
	}
	num := func(flag string, v int) {
		if v != 0 {
			args = append(args, flag+"="+strconv.Itoa(v))
		}
	}
	str("--partition", res.Partition)
	str("--account", res.Account)
	str("--qos", res.QOS)
	if res.Time > 0 {
		args = append(args, "--time="+res.Time.String())
	}
	num("--gpus", res.GPUs)
	str("--gpu-type", res.GPUType)
	num("--cpus", res.CPUs)
	str("--mem", res.Mem)
	num("--max-parallel", res.MaxParallel)
	for _, e := range res.Extra {
		args = append(args, "--sbatch-extra="+e)
	}
	for _, p := range res.Prologue {
		args = append(args, "--prologue="+p)
	}
	return args
}

// shellLine is cmd as one line of shell, each word quoted.
func shellLine(cmd []string) string {
	words := make([]string, len(cmd))
	for i, w := range cmd {
		words[i] = slurm.Quote(w)
	}
	return strings.Join(words, " ")
}

// held says why the run must not get another chain now: its jobs in
// the ledger that Slurm still runs or queues, or a live lease of another
// process.
func (s *Submitter) held(ctx context.Context) (string, error) {
	live, err := LiveJobs(ctx, s.Planner.Store, s.Planner.Run, s.Scheduler)
	if err != nil {
		return "", err
	}
	live = slices.DeleteFunc(live, func(j slurm.Job) bool {
		return s.Self != "" && (j.ID == s.Self || j.ArrayJobID == s.Self)
	})
	if len(live) > 0 {
		var parts []string
		for _, j := range live {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", j.ID, j.Name, j.State))
		}
		return fmt.Sprintf("run %s has jobs in Slurm: %s; cancel them (scancel) to submit anew", s.Planner.Run, strings.Join(parts, ", ")), nil
	}
	rec, held, err := s.Planner.LeaseHolder(ctx)
	if err != nil {
		return "", err
	}
	if held {
		return fmt.Sprintf("run %s is held by %s until %s; that process drives it", s.Planner.Run, rec.Holder, rec.Expires.Format(time.RFC3339)), nil
	}
	return "", nil
}

// LedgerJobs returns the job ids the run's ledger records, oldest first,
// with the entry that recorded each.
func LedgerJobs(ctx context.Context, store *storage.Store, run string) ([]string, map[string]ledger.Entry, error) {
	entries, err := ledger.Read(ctx, store, run)
	if err != nil {
		return nil, nil, err
	}
	var ids []string
	by := map[string]ledger.Entry{}
	for _, e := range entries {
		if e.Kind != ledger.KindJobs {
			continue
		}
		for _, id := range e.Jobs {
			if _, ok := by[id]; !ok {
				ids = append(ids, id)
			}
			by[id] = e
		}
	}
	return ids, by, nil
}

// maxLiveCheck is how many of the newest recorded jobs LiveJobs asks
// Slurm about.
const maxLiveCheck = 64

// LiveJobs are the run's jobs (as recorded in its ledger) that Slurm still
// queues or runs, leaving out those pending on a dependency that failed.
func LiveJobs(ctx context.Context, store *storage.Store, run string, sched slurm.Scheduler) ([]slurm.Job, error) {
	ids, _, err := LedgerJobs(ctx, store, run)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	// A run's jobs end in the order it submitted them, so the newest
	// ids are the ones that can still be alive; this keeps squeue's
	// command line short however long the run.
	ids = ids[max(len(ids)-maxLiveCheck, 0):]
	jobs, err := sched.Jobs(ctx, slurm.Filter{IDs: ids, User: "*"})
	if err != nil {
		return nil, fmt.Errorf("jobs of run %s: %w", run, err)
	}
	return slices.DeleteFunc(jobs, func(j slurm.Job) bool { return j.Done() || j.NeverRuns() }), nil
}
