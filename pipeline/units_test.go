package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/storage"
)

// Units reads a run as the planner does: every committed position in
// schedule order with its phase, whether it is done, and the rollouts of
// its counted stage — checked against the rollout rows the manifests hold,
// for a finished whale run and for one stopped inside a weight step.
func TestUnits(t *testing.T) {
	w := newWorld(t, "file://"+filepath.ToSlash(t.TempDir()))
	ctx := context.Background()
	cases := []struct {
		name, body string
		steps      int // stages to run; -1: to the end
		want       []string
	}{{
		name: "units-whale",
		body: "switch: {mode: fixed, fixed: {epochs: 1, iterations: 2}}\nbudget: {weight_steps: 3}\neval: {k: 2, test_every_phase: true}\n",
		// position kind phase done
		want: []string{"r001-w01 weight 0 true", "r001-w02 weight 0 true", "r001-wt test 0 true", "r001-h01 harness 1 true",
			"r001-h02 harness 1 true", "r001-ht test 1 true", "r002-w01 weight 2 true", "r002-wt test 2 true"},
		steps: -1,
	}, {
		name:  "units-partial",
		body:  "schedule: weights-only\nswitch: {fixed: {epochs: 1}}\nbudget: {weight_steps: 2}\n",
		want:  []string{"r001-w01 weight 0 true", "r001-w02 weight 0 false"},
		steps: 5,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := w.runner(t, w.experiment(t, tc.name, tc.body))
			if tc.steps < 0 {
				runToEnd(t, r)
			} else {
				for range tc.steps {
					if _, err := r.Step(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			units, ignored, err := Units(ctx, w.store, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if len(ignored) != 0 {
				t.Errorf("ignored %v, want none", ignored)
			}
			var got []string
			for _, u := range units {
				got = append(got, fmt.Sprintf("%s %s %d %v", u.Pos, u.Kind, u.Phase, u.Done))
				// The counted stage's rollout rows are the unit's rollouts.
				var rows int64
				for _, m := range u.Stages {
					rows += m.Rows("rollouts")
				}
				if u.Rollouts != rows || rows == 0 {
					t.Errorf("%s: Rollouts %d, the stages hold %d rollout rows (want equal, not 0)", u.Pos, u.Rollouts, rows)
				}
				if u.Budgeted() == (u.Kind == schedule.KindTest) {
					t.Errorf("%s: Budgeted %v for a %s unit", u.Pos, u.Budgeted(), u.Kind)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("units:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			// Survey reads the same units, and plans as Plan does.
			sv, err := r.Planner.Survey(ctx)
			if err != nil || sv.PlanErr != nil {
				t.Fatal(err, sv.PlanErr)
			}
			if !reflect.DeepEqual(sv.Units, units) {
				t.Errorf("Survey's units differ from Units'")
			}
			p, err := r.Plan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sv.Plan.Done() != (tc.steps < 0) || sv.Plan.Done() != p.Done() || sv.Plan.Stage != p.Stage || !reflect.DeepEqual(sv.Plan.Decision, p.Decision) {
				t.Errorf("Survey planned %+v (done %v), Plan %+v (done %v)", sv.Plan.Decision, sv.Plan.Done(), p.Decision, p.Done())
			}
		})
	}
}

// A stage committed by hand under a free-form name is not a unit.
func TestUnitsIgnoresFreeFormPositions(t *testing.T) {
	w := newWorld(t, "mem://")
	ctx := context.Background()
	id, err := storage.NewIdentity("hand", "scratch", "rollout", nil, map[string]int{"n": 1}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, err := storage.OpenAttempt(ctx, w.store, id, storage.AttemptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := a.NewShard(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	units, ignored, err := Units(ctx, w.store, "hand")
	if err != nil {
		t.Fatal(err)
	}
	if len(units) != 0 || len(ignored) != 1 || !strings.HasSuffix(ignored[0], "/scratch-rollout") {
		t.Errorf("units %v, ignored %v; want no unit and the scratch folder ignored", units, ignored)
	}
}
