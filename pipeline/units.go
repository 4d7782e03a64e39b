package pipeline

import (
	"context"
	"maps"

	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/storage"
)

// Unit is one position of a run as its committed stages show it: the
// planner's own reading of the artifacts, for tools that report on a run
// (whale report) and must count and group exactly as the planner does.
type Unit struct {
	Pos  schedule.Pos
	Kind schedule.Kind // KindWeight, KindHarness or KindTest
	// Phase numbers the run's weight and harness phases from 0 in the
	// order they ran; a test carries the phase it follows (-1 for a test
	// before any phase).
	Phase int
	// Done: the unit's last stage has committed.
	Done bool
	// Rollouts are the target-model episodes the unit's committed stages
	// ran: a weight step's rollout stage, a harness iteration's or a
	// test's evaluate stage. Only weight steps and harness iterations count
	// against budget.rollouts (see Budgeted).
	Rollouts int64
	// Stages are the unit's committed stages by name (the newest committed
	// attempt of each).
	Stages map[string]*storage.Manifest
}

// Budgeted reports whether the unit's rollouts count against the budget:
// tests are scored apart.
func (u *Unit) Budgeted() bool { return u.Kind != schedule.KindTest }

// Units returns the run's committed positions in schedule order, and the
// stage folders it ignored because their position is not one of the
// schedule's (free-form names, stages rerun by hand). A unit whose later
// stages are not committed yet (a run in progress, or stopped by a failed
// stage) is included with Done false.
func Units(ctx context.Context, s *storage.Store, run string) ([]Unit, []string, error) {
	st, err := scan(ctx, s, run)
	if err != nil {
		return nil, nil, err
	}
	return st.export(), st.ignored, nil
}

// Survey is a run as a report shows it: its units (see Units) and what the
// planner does next, from one reading of its artifacts.
type Survey struct {
	Units   []Unit
	Ignored []string
	// Plan is what Plan returns for the same reading; nil, with PlanErr
	// saying why, when the planner cannot decide.
	Plan    *Plan
	PlanErr error
}

// Survey reads the run's committed stages once for both its units and its
// plan: a report that read them twice would list and read every manifest
// twice, and could see two different states of a running run.
func (pl *Planner) Survey(ctx context.Context) (*Survey, error) {
	st, err := scan(ctx, pl.Store, pl.Run)
	if err != nil {
		return nil, err
	}
	sv := &Survey{Units: st.export(), Ignored: st.ignored}
	sv.Plan, sv.PlanErr = pl.planFrom(ctx, st)
	return sv, nil
}

// export is the state's units as Units returns them.
func (st *state) export() []Unit {
	out := make([]Unit, len(st.units))
	for i, u := range st.units {
		out[i] = Unit{Pos: u.pos, Kind: u.kind, Phase: u.phase, Done: u.done(), Stages: maps.Clone(u.stages)}
		var counted *storage.Manifest
		switch u.kind {
		case schedule.KindWeight:
			counted = u.stages[StageRollout]
		default:
			counted = u.stages[StageEvaluate]
		}
		if counted != nil {
			out[i].Rollouts = int64(num(counted.Summary, "episodes"))
		}
	}
	return out
}
