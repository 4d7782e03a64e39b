package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// What Slurm jobs run: shards of a sharded rollout in any order, one of
// them twice (a requeue), and the commit job after them. The stage holds
// one part per shard, every episode once, and equals the stage a single
// Step runs.
func TestShardsAndFinalize(t *testing.T) {
	body := "schedule: weights-only\nbudget: {weight_steps: 1}\nrollout: {shards: 3}\neval: {test_every_phase: false, k: 2}\n"
	ctx := context.Background()

	ref := newWorld(t, "file://"+filepath.ToSlash(t.TempDir()))
	refExp := ref.experiment(t, "shards", body)
	if _, err := ref.runner(t, refExp).Step(ctx); err != nil {
		t.Fatal(err)
	}
	want := artifacts(t, ref.store, refExp.Name)

	w := newWorld(t, "file://"+filepath.ToSlash(t.TempDir()))
	exp := w.experiment(t, "shards", body)
	r := w.runner(t, exp)
	p, err := r.Plan(ctx)
	if err != nil || p.Stage != StageRollout || p.Spec.Shards != 3 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	pos := p.Decision.Position

	tests := []struct {
		name      string
		run       func() (*StepResult, error)
		committed bool
		wantErr   error
	}{
		{"finalize before any shard", func() (*StepResult, error) { return r.FinalizeStage(ctx, StageRollout, pos) }, false, storage.ErrNotFound},
		{"shard 2", func() (*StepResult, error) { return r.RunShard(ctx, StageRollout, pos, 2, 3) }, false, nil},
		{"shard 2 again", func() (*StepResult, error) { return r.RunShard(ctx, StageRollout, pos, 2, 3) }, false, nil},
		{"shard 0", func() (*StepResult, error) { return r.RunShard(ctx, StageRollout, pos, 0, 3) }, false, nil},
		{"finalize with one missing", func() (*StepResult, error) { return r.FinalizeStage(ctx, StageRollout, pos) }, false, stages.ErrPartsMissing},
		{"wrong shard count", func() (*StepResult, error) { return r.RunShard(ctx, StageRollout, pos, 1, 2) }, false, errAny},
		{"shard out of range", func() (*StepResult, error) { return r.RunShard(ctx, StageRollout, pos, 3, 3) }, false, errAny},
		{"last shard commits", func() (*StepResult, error) { return r.RunShard(ctx, StageRollout, pos, 1, 3) }, true, nil},
		{"finalize after", func() (*StepResult, error) { return r.FinalizeStage(ctx, StageRollout, pos) }, true, nil},
		{"a requeued shard after the commit", func() (*StepResult, error) { return r.RunShard(ctx, StageRollout, pos, 0, 3) }, true, nil},
	}
	for _, tt := range tests {
		res, err := tt.run()
		switch {
		case tt.wantErr == errAny && err == nil, tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
			t.Fatalf("%s: err %v, want %v", tt.name, err, tt.wantErr)
		case err == nil && res.Result.Committed != tt.committed:
			t.Fatalf("%s: committed %v, want %v (%+v)", tt.name, res.Result.Committed, tt.committed, res.Result)
		}
		if tt.name == "shard 2 again" && !res.Result.ShardSkipped {
			t.Errorf("a shard that committed its part ran again: %+v", res.Result)
		}
	}
	m, err := storage.LatestCommitted(ctx, w.store, exp.Name, pos, StageRollout)
	if err != nil {
		t.Fatal(err)
	}
	shards := map[int]int{}
	for _, f := range m.Table("rollouts") {
		shards[f.Shard]++
	}
	if len(shards) != 3 || shards[0] != 1 || shards[1] != 1 || shards[2] != 1 {
		t.Errorf("rollout files per shard %v, want one each of 0, 1, 2", shards)
	}
	if got := artifacts(t, w.store, exp.Name); !slices.Equal(got, want) {
		t.Errorf("sharded by jobs:\n%v\nby one step:\n%v", got, want)
	}
	// The planner moves on, and the ledger says who committed.
	if p, err := r.Plan(ctx); err != nil || p.Stage != StageFilter {
		t.Errorf("after the commit the plan is %+v, %v; want filter", p, err)
	}
	entries, err := ledger.Read(ctx, w.store, exp.Name)
	if err != nil {
		t.Fatal(err)
	}
	commits := 0
	for _, e := range entries {
		if e.Kind == ledger.KindStage {
			commits++
		}
	}
	if commits != 1 {
		t.Errorf("%d stage commits in the ledger, want 1: %+v", commits, entries)
	}
}

var errAny = errors.New("any error")
