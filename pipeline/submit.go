package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// What a batch scheduler's jobs run: one shard of a sharded stage
// (RunShard, a Slurm array task) and the commit of a sharded stage once
// its shards are done (FinalizeStage, the job after the array).
//
// Neither takes the run's lease. The shards of a stage run at the same
// time by design, and a shard may run twice (a requeue): the commit
// protocol, not the lease, keeps that safe — part names are unique per
// shard and try, one try per shard commits its part-manifest, and one
// writer commits the stage. The lease serialises planning (Step); the
// stage these jobs run was fixed when they were submitted, and its
// identity (inputs, config, seed, shard count) is checked again here.

// RecordJobs appends a KindJobs entry to the run's ledger: the scheduler
// jobs submitted for stage at position, and how they hang together.
func (pl *Planner) RecordJobs(ctx context.Context, position, stage, reason string, ids []string) error {
	holder := "whale submit"
	_, err := ledger.Append(context.WithoutCancel(ctx), pl.Store, pl.Run,
		ledger.Entry{Kind: ledger.KindJobs, Position: position, Stage: stage, Reason: reason, Jobs: ids, Holder: holder})
	return err
}

// RunShard runs shard of a stage at position, as one of shards parts.
// The stage commits here only when this shard's part is the last one
// missing; otherwise Result.Missing lists the shards still to come (the
// commit job, FinalizeStage, then commits it). shards must be the stage's
// own shard count: a different one would be another identity.
func (r *Runner) RunShard(ctx context.Context, name, position string, shard, shards int) (*StepResult, error) {
	p, err := r.PlanAt(ctx, name, position)
	if err != nil {
		return nil, err
	}
	if want := max(p.Spec.Shards, 1); shards != want {
		return nil, fmt.Errorf("%s at %s runs as %d shards, not %d", name, position, want, shards)
	}
	if shard < 0 || shard >= shards {
		return nil, fmt.Errorf("%s at %s: shard %d is not in 0..%d", name, position, shard, shards-1)
	}
	st, err := r.prepare(ctx, name, p.Harness, p.Model)
	if err != nil {
		return nil, err
	}
	spc := p.Spec
	spc.Shard, spc.Log = shard, r.log()
	res, err := stages.Execute(ctx, r.Store, spc, st)
	out := &StepResult{Plan: p, Result: res}
	if err != nil {
		r.record(ctx, ledger.Entry{Kind: ledger.KindFailure, Position: position, Stage: name,
			Error: fmt.Sprintf("shard %d of %d: %v", shard, shards, err)})
		return out, &StageError{Stage: name, Position: position, Shard: fmt.Sprintf("%d of %d", shard, shards), Err: err}
	}
	if res.CommittedHere {
		r.record(ctx, ledger.Entry{Kind: ledger.KindStage, Position: position, Stage: name,
			Folder: res.Folder, Summary: res.Manifest.Summary})
	}
	return out, nil
}

// FinalizeStage commits a sharded stage at position whose shards have all
// committed their parts, for the job that runs after them. It runs no
// shard; a committed stage is returned as is, and missing shards are an
// error that errors.Is stages.ErrPartsMissing and names them.
func (r *Runner) FinalizeStage(ctx context.Context, name, position string) (*StepResult, error) {
	p, err := r.PlanAt(ctx, name, position)
	if err != nil {
		return nil, err
	}
	st, err := r.stageImpl(name)
	if err != nil {
		return nil, err
	}
	spc := p.Spec
	spc.Log = r.log()
	res, err := stages.Finalize(ctx, r.Store, spc, st)
	out := &StepResult{Plan: p, Result: res}
	if err != nil {
		r.record(ctx, ledger.Entry{Kind: ledger.KindFailure, Position: position, Stage: name, Error: err.Error()})
		return out, fmt.Errorf("commit %s at %s: %w", name, position, err)
	}
	if res.CommittedHere {
		r.record(ctx, ledger.Entry{Kind: ledger.KindStage, Position: position, Stage: name,
			Folder: res.Folder, Summary: res.Manifest.Summary})
	}
	return out, nil
}

// LeaseHolder returns the run's live lease, if another process holds one
// now: a submitter leaves the run to it.
func (pl *Planner) LeaseHolder(ctx context.Context) (storage.LeaseRecord, bool, error) {
	rec, ok, err := storage.ReadLease(ctx, pl.Store, "runs/"+pl.Run+"/lease")
	if err != nil || !ok {
		return rec, false, err
	}
	return rec, !rec.Released && rec.Live(time.Now()), nil
}
