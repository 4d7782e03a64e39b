package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/internal/retry"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/filter"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/stages/propose"
	"github.com/whalerun/whale/stages/rollout"
	"github.com/whalerun/whale/storage"
)

// wrapStage wraps every stage prepare builds: the identity, except in the
// crash tests, which stall a stage between its upload and its commit.
var wrapStage = func(s stages.Stage) stages.Stage { return s }

// Runner executes a run's stages.
type Runner struct {
	Planner
	Runtime *Runtime
	Log     *slog.Logger
	// Out receives progress bars (when a terminal) and the trainer's log.
	Out io.Writer
	// Holder names this process in the lease and the ledger; default
	// "whale (host, pid)".
	Holder string
	// Retry is how RunToEnd runs a step again after a transient failure;
	// zero: StepRetry.
	Retry retry.Policy
	// LeaseTTL is how long the run's lease lasts without renewal; 0:
	// LeaseTTL.
	LeaseTTL time.Duration
	// Jobs reports the Slurm job of a lease holder on another host, to
	// take over its lease once the job is over; nil: Slurm's own commands
	// where this machine has them.
	Jobs JobStates
	// Wait makes RunToEnd wait while another live process holds the
	// run's lease, instead of returning its *storage.LeaseHeldError.
	Wait bool
	// CommandDir is where the trainer and reload commands run: the
	// directory `whale init` ran in (spec.Run.Dir); empty: the current one.
	CommandDir string
}

// StepRetry is how often, and how patiently, RunToEnd runs a step again
// after a transient failure: stages are idempotent and resume what they
// committed, so running one again is safe.
var StepRetry = retry.Policy{Attempts: 3, Base: 5 * time.Second, Max: time.Minute}

// Transient reports whether a failed step may succeed when it runs again
// unchanged: the outside world failed — storage still failing after its
// own retries, a model endpoint down, the lease lost — and not the run's
// inputs, a trainer, a reload or whale itself. It asks the error's origin
// (a *storage.Error, a *models.Error), never its text. Every other error
// halts the run at once, as Thanos halts a compaction it cannot finish.
func Transient(err error) bool {
	if errors.Is(err, storage.ErrLeaseLost) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var me *models.Error
	if errors.As(err, &me) {
		switch me.Kind {
		case models.KindRateLimited, models.KindServerError, models.KindTimeout, models.KindConnection:
			return true
		}
		return false
	}
	var se *storage.Error
	return errors.As(err, &se) && storage.Transient(se)
}

// StageError is a stage's failure at a position (and, for one shard of an
// array job, which shard: "2 of 4"). Whatever it wraps — a stored harness
// that no longer loads, a key made from bad data — it is a failure of the
// run, not bad input on the command line.
type StageError struct {
	Stage, Position, Shard string
	Err                    error
}

func (e *StageError) Error() string {
	s := e.Stage + " at " + e.Position
	if e.Shard != "" {
		s += ", shard " + e.Shard
	}
	return s + ": " + e.Err.Error()
}

func (e *StageError) Unwrap() error { return e.Err }

// LoadRun reads runs/<run>/run.json.
func LoadRun(ctx context.Context, s *storage.Store, run string) (*spec.Run, error) {
	key := "runs/" + run + "/run.json"
	data, err := s.ReadAll(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("run %s: no %s in %s: create it with `whale init`", run, key, s.URL())
	}
	if err != nil {
		return nil, err
	}
	return spec.DecodeRun(key, data)
}

func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

func (r *Runner) holder() string {
	if r.Holder != "" {
		return r.Holder
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("whale (%s, pid %d)", host, os.Getpid())
}

// StepResult says what Step did.
type StepResult struct {
	Plan   *Plan
	Result stages.Result
}

// Step runs the run's next stage under its lease. With the schedule at its
// end it records that and returns a Plan that is Done. Another holder of
// the lease gives a *storage.LeaseHeldError, which errors.Is
// storage.ErrLeaseHeld.
func (r *Runner) Step(ctx context.Context) (*StepResult, error) {
	lease, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	lctx, stop := lease.KeepAlive(ctx, 0)
	res, err := r.stepLocked(lctx)
	stop()
	if cause := context.Cause(lctx); err != nil && cause != nil && errors.Is(cause, storage.ErrLeaseLost) {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	if rerr := lease.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
		r.log().Warn("release lease", "run", r.Run, "err", rerr)
	}
	return res, err
}

func (r *Runner) stepLocked(ctx context.Context) (*StepResult, error) {
	p, err := r.Plan(ctx)
	if err != nil {
		return nil, err
	}
	out := &StepResult{Plan: p}
	if p.Done() {
		r.record(ctx, ledger.Entry{Kind: ledger.KindDone, Reason: p.Decision.Reason, Signals: signals(p)})
		return out, nil
	}
	r.record(ctx, ledger.Entry{Kind: ledger.KindDecision, Position: p.Decision.Position, Stage: p.Stage,
		Reason: p.Decision.Reason, Signals: signals(p)})
	res, err := r.execute(ctx, p.Stage, p.Spec, p.Harness, p.Model)
	out.Result = res
	if err != nil {
		r.record(ctx, ledger.Entry{Kind: ledger.KindFailure, Position: p.Decision.Position, Stage: p.Stage, Error: err.Error()})
		return out, &StageError{Stage: p.Stage, Position: p.Decision.Position, Err: err}
	}
	if res.Committed {
		r.record(ctx, ledger.Entry{Kind: ledger.KindStage, Position: p.Decision.Position, Stage: p.Stage,
			Folder: res.Folder, Summary: res.Manifest.Summary})
	}
	return out, nil
}

func signals(p *Plan) map[string]any {
	out := make(map[string]any, len(p.Decision.Signals)+2)
	for k, v := range p.Decision.Signals {
		out[k] = v
	}
	if p.Model != "" {
		out["model"] = p.Model
	}
	if p.Harness != "" {
		out["harness"] = p.Harness
	}
	return out
}

// record appends to the ledger; a failure to write it is logged, not
// fatal: the artifacts, not the ledger, are the run's state.
func (r *Runner) record(ctx context.Context, e ledger.Entry) {
	e.Holder = r.holder()
	if _, err := ledger.Append(context.WithoutCancel(ctx), r.Store, r.Run, e); err != nil {
		r.log().Warn("ledger", "run", r.Run, "err", err)
	}
}

// RunToEnd steps until the schedule ends, the context ends or a step
// fails for good. Each step takes and releases the lease. A step that
// fails transiently (see Transient) runs again under r.Retry, except a
// finetune; any other failure returns at once, as it was.
func (r *Runner) RunToEnd(ctx context.Context, each func(*StepResult)) error {
	policy := r.Retry
	if policy == (retry.Policy{}) {
		policy = StepRetry
	}
	for {
		var (
			res  *StepResult
			last error // the transient failure a retry follows
		)
		err := retry.Do(ctx, policy, func(ctx context.Context) error {
			var err error
			res, err = r.step(ctx)
			var held *storage.LeaseHeldError
			switch {
			case err == nil:
				return nil
			case last != nil && errors.As(err, &held):
				// The failure that made us retry may have kept our own
				// lease from being released: that failure is the answer,
				// not a busy run.
				return retry.Permanent(last)
			case res != nil && res.Plan != nil && res.Plan.Stage == StageFinetune:
				// A trainer runs outside the bucket on GPUs and does not
				// resume: running it again is for the user to decide.
				return retry.Permanent(err)
			case !Transient(err):
				return retry.Permanent(err)
			}
			last = err
			return err
		}, retry.OnRetry(func(e retry.Event) {
			r.log().Warn("step failed transiently; running it again", "run", r.Run, "attempt", e.Attempt, "wait", e.Wait, "err", e.Err)
		}))
		if err != nil {
			return err
		}
		if each != nil {
			each(res)
		}
		if res.Plan.Done() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// step is Step, waiting with r.Wait while another live process holds the
// lease: polled every twentieth of the TTL (1-10 s) or when the holder's
// lease expires if sooner, until the holder releases it, its lease
// expires or its holder is found to have ended.
func (r *Runner) step(ctx context.Context) (*StepResult, error) {
	waiting := false
	for {
		res, err := r.Step(ctx)
		var held *storage.LeaseHeldError
		if !r.Wait || !errors.As(err, &held) {
			return res, err
		}
		if !waiting {
			c := held.Current
			r.log().Info("run is busy: waiting for its lease", "run", r.Run, "holder", c.Holder, "host", c.Host, "pid", c.PID, "expires", c.Expires)
			waiting = true
		}
		ttl := r.LeaseTTL
		if ttl == 0 {
			ttl = LeaseTTL
		}
		poll := min(max(ttl/20, time.Second), 10*time.Second)
		t := time.NewTimer(max(min(poll, time.Until(held.Current.Expires)+50*time.Millisecond), 50*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the lease of run %s: %w", r.Run, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// execute runs every shard of a stage in this process (the last one
// commits it).
func (r *Runner) execute(ctx context.Context, name string, spc stages.Spec, harnessID, model string) (stages.Result, error) {
	st, err := r.prepare(ctx, name, harnessID, model)
	if err != nil {
		return stages.Result{}, err
	}
	spc.Log = r.log()
	shards := max(spc.Shards, 1)
	var res stages.Result
	for i := range shards {
		spc.Shard = i
		if res, err = stages.Execute(ctx, r.Store, spc, st); err != nil {
			return res, err
		}
		if res.Skipped || res.Committed {
			break
		}
	}
	return res, nil
}

// prepare is the stage implementation of name wired to run with the
// harness and the model the plan chose: the harness is in the root's
// archive, and the stage asks for the model by its served name.
// Candidates reach the archive when evaluate scores them; ensureArchived
// mends a crash in between.
func (r *Runner) prepare(ctx context.Context, name, harnessID, model string) (stages.Stage, error) {
	if harnessID != "" {
		if err := r.ensureArchived(ctx, harnessID); err != nil {
			return nil, err
		}
	}
	st, err := r.stageImpl(name)
	if err != nil {
		return nil, err
	}
	if err := r.useModel(st, model); err != nil {
		return nil, err
	}
	return wrapStage(st), nil
}

func (r *Runner) stageImpl(name string) (stages.Stage, error) {
	rt := r.Runtime
	if rt == nil {
		return nil, errors.New("runner has no runtime")
	}
	e := r.Spec
	switch name {
	case StageRollout:
		return &rollout.Stage{Domain: rt.Domain, Model: rt.Model, Concurrency: e.Rollout.Concurrency,
			Progress: r.Out, Log: r.Log, Archive: r.Store}, nil
	case StageFilter:
		return filter.Stage{}, nil
	case StageFinetune:
		endpoints := e.Model.Endpoints
		if len(rt.ModelEndpoints) > 0 {
			endpoints = rt.ModelEndpoints
		}
		// The reload goes to the servers rollouts call, with their key.
		var key string
		if e.Model.APIKeyEnv != "" {
			key = os.Getenv(e.Model.APIKeyEnv)
		}
		return &finetune.Stage{Log: r.Log, Stdout: r.Out, ReloadEndpoints: endpoints, WorkDir: rt.WorkDir, APIKey: key,
			CommandDir: r.CommandDir}, nil
	case StagePropose:
		// The agent's sandbox hides a file:// root's directory and whale's
		// caches and work folders.
		return &propose.Stage{Domain: rt.Domain, LLM: rt.Proposer, Log: r.Log, Sources: propose.StoreSources(r.Store),
			RootDir: propose.StoreDir(r.Store), Hide: []string{rt.CacheDir, rt.WorkDir}, SecretEnv: r.keyVars()}, nil
	case StageEvaluate:
		return r.evaluateImpl(), nil
	}
	return nil, fmt.Errorf("unknown stage %q", name)
}

// ensureArchived makes sure a harness id can be loaded from the root's
// archive: evaluate stores every candidate it scores there, and one that
// is missing (an archive written before a crash, or cleaned up) is copied
// again from the committed propose stage that made it.
func (r *Runner) ensureArchived(ctx context.Context, id string) error {
	if _, err := archive.ParseID(id); err != nil {
		return nil // a baseline name such as h0
	}
	_, err := archive.Get(ctx, r.Store, id)
	if err == nil || !errors.Is(err, archive.ErrNotFound) {
		return err
	}
	ms, err := storage.ListCommitted(ctx, r.Store, r.Run)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Stage != StagePropose {
			continue
		}
		if err := r.archiveCandidates(ctx, m); err != nil {
			return err
		}
	}
	if _, err := archive.Get(ctx, r.Store, id); err != nil {
		return fmt.Errorf("harness %s: %w (no committed propose stage of run %s holds it)", id, err, r.Run)
	}
	return nil
}

func (r *Runner) archiveCandidates(ctx context.Context, m *storage.Manifest) error {
	for _, f := range m.Table("candidates") {
		ra, err := r.Store.OpenReaderAt(ctx, m.FileKey(f))
		if err != nil {
			return err
		}
		err = schemas.ReadRows(ctx, ra, ra.Size(), func(c schemas.Candidate) error {
			_, err := archive.Put(ctx, r.Store, []byte(c.Source))
			return err
		})
		if err != nil {
			return fmt.Errorf("archive candidates of %s: %w", m.Dir, err)
		}
	}
	return nil
}

// RunStage reruns one stage at a position that the run has reached, under
// the lease: the stage gets the inputs and config the planner gives it
// there. With force a committed stage runs again as a new attempt; without,
// a committed stage with the same identity is a no-op and one with another
// identity an error saying what differs.
func (r *Runner) RunStage(ctx context.Context, name, position string, force bool) (*StepResult, error) {
	lease, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	lctx, stop := lease.KeepAlive(ctx, 0)
	defer func() {
		stop()
		if rerr := lease.Release(context.WithoutCancel(ctx)); rerr != nil {
			r.log().Warn("release lease", "run", r.Run, "err", rerr)
		}
	}()
	p, err := r.PlanAt(lctx, name, position)
	if err != nil {
		return nil, err
	}
	p.Spec.Force = force
	r.record(lctx, ledger.Entry{Kind: ledger.KindDecision, Position: position, Stage: name,
		Reason: fmt.Sprintf("whale stage %s --at %s (force %v)", name, position, force), Signals: signals(p)})
	res, err := r.execute(lctx, name, p.Spec, p.Harness, p.Model)
	if err != nil {
		r.record(lctx, ledger.Entry{Kind: ledger.KindFailure, Position: position, Stage: name, Error: err.Error()})
		return &StepResult{Plan: p, Result: res}, &StageError{Stage: name, Position: position, Err: err}
	}
	if res.Committed {
		r.record(lctx, ledger.Entry{Kind: ledger.KindStage, Position: position, Stage: name, Folder: res.Folder, Summary: res.Manifest.Summary})
	}
	return &StepResult{Plan: p, Result: res}, nil
}

// keyVars are the variables the experiment names for its keys, whatever
// their names: the agent proposer scrubs their values as secrets.
func (r *Runner) keyVars() []string {
	e := r.Spec
	var out []string
	for _, v := range append([]string{e.Model.APIKeyEnv, e.Harness.LLM.APIKeyEnv, e.Tools.RetrieverAPIKeyEnv}, e.Harness.Agent.Env...) {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}
