package slurm

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// The fake follows a sharded stage the way the real cluster does in
// integration_test.go: array, then a commit job after it.
func TestFakeShardedStage(t *testing.T) {
	for _, tc := range []struct {
		name       string
		taskEnd    []string
		keep       bool
		wantArray  string
		wantCommit string
		wantReason string
	}{
		{"all shards succeed", []string{StateCompleted, StateCompleted, StateCompleted}, false, StateCompleted, StatePending, "None"},
		{"a shard fails: commit cancelled", []string{StateCompleted, StateFailed, StateCompleted}, false, StateFailed, StateCancelled, ReasonDependencyNeverSatisfied},
		{"a shard fails: commit kept", []string{StateCompleted, StateFailed, StateCompleted}, true, StateFailed, StatePending, ReasonDependencyNeverSatisfied},
		{"a shard times out", []string{StateTimeout, StateCompleted, StateCompleted}, false, StateTimeout, StateCancelled, ReasonDependencyNeverSatisfied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			f := NewFake()
			r := DefaultRenderer()
			arr, err := r.Render(TemplateArray, Spec{Name: "whale-x-r001-rollout", Command: []string{"whale"}, Shards: 3})
			if err != nil {
				t.Fatal(err)
			}
			aid, err := f.Submit(ctx, arr)
			if err != nil {
				t.Fatal(err)
			}
			com, err := r.Render(TemplateCommit, Spec{Name: "whale-x-r001-commit", Command: []string{"whale"}, AfterOK: []string{aid}, KeepOnInvalidDep: tc.keep})
			if err != nil {
				t.Fatal(err)
			}
			cid, err := f.Submit(ctx, com)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Start(cid); err == nil {
				t.Error("the commit job started before its dependency")
			}
			for i, end := range tc.taskEnd {
				id := aid + "_" + string(rune('0'+i))
				if err := f.Start(id); err != nil {
					t.Fatal(err)
				}
				if err := f.Finish(id, end); err != nil {
					t.Fatal(err)
				}
			}
			a, err := f.State(ctx, aid)
			if err != nil {
				t.Fatal(err)
			}
			c, err := f.State(ctx, cid)
			if err != nil {
				t.Fatal(err)
			}
			if a.State != tc.wantArray || len(a.Tasks) != 3 {
				t.Errorf("array %s with %d tasks, want %s with 3", a.State, len(a.Tasks), tc.wantArray)
			}
			if c.State != tc.wantCommit || c.Reason != tc.wantReason {
				t.Errorf("commit %s/%s, want %s/%s", c.State, c.Reason, tc.wantCommit, tc.wantReason)
			}
			if tc.wantReason == "None" {
				if err := f.Start(cid); err != nil {
					t.Errorf("commit could not start after the array: %v", err)
				}
			}
			jobs, err := f.Jobs(ctx, Filter{NamePrefix: "whale-x-r001-roll"})
			if err != nil || len(jobs) != 3 {
				t.Errorf("Jobs by prefix: %d jobs, %v; want the 3 tasks", len(jobs), err)
			}
		})
	}
}

func TestFakeCancelAndErrors(t *testing.T) {
	ctx := t.Context()
	f := NewFake()
	script, err := DefaultRenderer().Render(TemplateStage, Spec{Name: "a", Command: []string{"sleep", "9"}})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := f.Submit(ctx, script)
	if err := f.Cancel(ctx, id, "424242"); err != nil {
		t.Fatal(err)
	}
	if j, _ := f.State(ctx, id); j.State != StateCancelled {
		t.Errorf("after cancel: %s", j.State)
	}
	if _, err := f.State(ctx, "424242"); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("unknown job: %v", err)
	}
	if err := f.Finish(id, StateRunning); err == nil {
		t.Error("Finish accepted a state that is not final")
	}
	if _, err := f.Submit(ctx, "echo no shebang"); err == nil {
		t.Error("a script without #! was accepted")
	}
	dep, _ := DefaultRenderer().Render(TemplateCommit, Spec{Name: "b", Command: []string{"true"}, AfterOK: []string{"999"}})
	if _, err := f.Submit(ctx, dep); err == nil {
		t.Error("a dependency on an unknown job was accepted")
	}
	f.SubmitErr = errors.New("sbatch: controller down")
	if _, err := f.Submit(ctx, script); !errors.Is(err, f.SubmitErr) {
		t.Errorf("SubmitErr not returned: %v", err)
	}
	if got := len(f.Scripts()); got != 1 {
		t.Errorf("%d scripts recorded, want 1", got)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Jobs(canceled, Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Jobs on a cancelled context: %v", err)
	}
	jobs, _ := f.Jobs(ctx, Filter{IDs: []string{id}})
	if ids := []string{}; len(jobs) != 1 || !slices.Equal(append(ids, jobs[0].ID), []string{id}) {
		t.Errorf("Jobs by id: %+v", jobs)
	}
}

func TestSubmitShardedCancelsArrayWhenCommitFails(t *testing.T) {
	ctx := t.Context()
	f := NewFake()
	r := DefaultRenderer()
	shards := Spec{Name: "whale-x-r001-rollout", Command: []string{"whale", "--shard={shard}"}, Shards: 2}
	aid, cid, err := SubmitSharded(ctx, f, r, shards, Spec{Name: "whale-x-r001-commit", Command: []string{"whale"}})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := f.State(ctx, cid); c.Dependency != "afterok:"+aid+"(unfulfilled)" {
		t.Errorf("commit dependency %q, want afterok on %s", c.Dependency, aid)
	}
	// A commit spec that cannot render leaves no array behind.
	aid2, _, err := SubmitSharded(ctx, f, r, shards, Spec{Name: "bad name", Command: []string{"whale"}})
	if err == nil || aid2 != "" {
		t.Fatalf("SubmitSharded with a bad commit spec: %q, %v", aid2, err)
	}
	jobs, _ := f.Jobs(ctx, Filter{})
	var cancelled int
	for _, j := range jobs {
		if j.State == StateCancelled {
			cancelled++
		}
	}
	if cancelled != 2 {
		t.Errorf("%d tasks cancelled, want the 2 of the orphaned array: %+v", cancelled, jobs)
	}
}
