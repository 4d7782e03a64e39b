package pipeline

import (
	"context"
	"fmt"
	"slices"

	"github.com/whalerun/whale/metrics"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/storage"
)

// Stage names, as they appear in folder names.
const (
	StageRollout  = "rollout"
	StageFilter   = "filter"
	StageFinetune = "finetune"
	StagePropose  = "propose"
	StageEvaluate = "evaluate"
)

// unitStages are the stages of a unit in the order they run.
func unitStages(kind schedule.Kind, index int) []string {
	switch kind {
	case schedule.KindWeight:
		return []string{StageRollout, StageFilter, StageFinetune}
	case schedule.KindHarness:
		if index <= 1 {
			return []string{StageEvaluate}
		}
		return []string{StagePropose, StageEvaluate}
	case schedule.KindTest:
		return []string{StageEvaluate}
	}
	return nil
}

// unit is one position of the run as the artifacts show it.
type unit struct {
	pos    schedule.Pos
	kind   schedule.Kind
	phase  int
	stages map[string]*storage.Manifest // committed stages at the position
}

func (u *unit) done() bool {
	st := unitStages(u.kind, u.pos.Index)
	return len(st) > 0 && u.stages[st[len(st)-1]] != nil
}

// state is what a run has committed, in schedule order.
type state struct {
	units []*unit
	// ignored are committed folders outside the schedule's positions
	// (free-form names, stages rerun by hand at odd places).
	ignored []string
}

func kindOf(p schedule.Pos) schedule.Kind {
	switch p.Section {
	case schedule.SectionWeight:
		return schedule.KindWeight
	case schedule.SectionHarness:
		return schedule.KindHarness
	}
	return schedule.KindTest
}

// scan reads the run's committed stages.
func scan(ctx context.Context, s *storage.Store, run string) (*state, error) {
	ms, err := storage.ListCommitted(ctx, s, run)
	if err != nil {
		return nil, fmt.Errorf("list stages of run %s: %w", run, err)
	}
	byPos := map[string]*unit{}
	st := &state{}
	for _, m := range ms {
		p, err := schedule.ParsePosition(m.Position)
		if err != nil {
			st.ignored = append(st.ignored, m.Dir)
			continue
		}
		u := byPos[m.Position]
		if u == nil {
			u = &unit{pos: p, kind: kindOf(p), stages: map[string]*storage.Manifest{}}
			byPos[m.Position] = u
			st.units = append(st.units, u)
		}
		u.stages[m.Stage] = m
	}
	slices.SortFunc(st.units, func(a, b *unit) int { return a.pos.Compare(b.pos) })
	// Phases: every weight or harness phase starts at index 1; a test
	// belongs to the phase it follows.
	phase := -1
	for _, u := range st.units {
		if u.kind != schedule.KindTest && u.pos.Index == 1 {
			phase++
		}
		u.phase = phase
	}
	return st, nil
}

// history is the run's finished units up to the first unfinished one, as
// the schedule takes them, and the unfinished unit if there is one.
func (st *state) history() (schedule.History, *unit, error) {
	var h schedule.History
	for _, u := range st.units {
		if !u.done() {
			return h, u, nil
		}
		su := schedule.Unit{Kind: u.kind, Phase: u.phase, Index: u.pos.Index}
		if u.kind == schedule.KindTest {
			su.Index = 0
		}
		switch u.kind {
		case schedule.KindWeight:
			r := u.stages[StageRollout]
			if r == nil {
				return nil, nil, fmt.Errorf("weight step %s: finetune committed without a committed rollout", u.pos)
			}
			su.Rollouts = int64(num(r.Summary, "episodes"))
			su.MeanReward = num(r.Summary, "mean_reward")
		case schedule.KindHarness:
			e := u.stages[StageEvaluate]
			su.Rollouts = int64(num(e.Summary, "episodes"))
			pts, err := evalPoints(e)
			if err != nil {
				return nil, nil, err
			}
			for _, p := range pts {
				su.Scores = append(su.Scores, p.Success)
				if p.Success >= 1 {
					su.Perfect = true
				}
			}
		case schedule.KindTest:
			su.Rollouts = int64(num(u.stages[StageEvaluate].Summary, "episodes"))
		}
		h = append(h, su)
	}
	return h, nil, nil
}

// find returns the unit at position pos, or nil.
func (st *state) find(pos string) *unit {
	for _, u := range st.units {
		if u.pos.String() == pos {
			return u
		}
	}
	return nil
}

// before returns the units that come before pos in schedule order.
func (st *state) before(pos schedule.Pos) []*unit {
	var out []*unit
	for _, u := range st.units {
		if u.pos.Compare(pos) < 0 {
			out = append(out, u)
		}
	}
	return out
}

// model returns the newest committed finetune before pos, or nil for the
// spec's initial model.
func (st *state) model(pos schedule.Pos) *storage.Manifest {
	var last *storage.Manifest
	for _, u := range st.before(pos) {
		if m := u.stages[StageFinetune]; m != nil {
			last = m
		}
	}
	return last
}

// archive returns the committed evaluate and propose manifests of harness
// phase phase before pos, in the order they ran.
func (st *state) archive(phase int, pos schedule.Pos) []*storage.Manifest {
	var out []*storage.Manifest
	for _, u := range st.before(pos) {
		if u.kind != schedule.KindHarness || u.phase != phase {
			continue
		}
		for _, name := range []string{StagePropose, StageEvaluate} {
			if m := u.stages[name]; m != nil {
				out = append(out, m)
			}
		}
	}
	return out
}

// harness returns the harness in force at pos: inside a harness phase the
// best of the phase so far, otherwise the winner of the newest finished
// harness phase; initial when there is none.
func (st *state) harness(pos schedule.Pos, initial string) (string, error) {
	var points []metrics.Point
	cur := -1
	for _, u := range st.before(pos) {
		if u.kind != schedule.KindHarness {
			continue
		}
		if u.phase != cur {
			cur, points = u.phase, nil
		}
		if e := u.stages[StageEvaluate]; e != nil {
			pts, err := evalPoints(e)
			if err != nil {
				return "", err
			}
			points = append(points, pts...)
		}
	}
	if w, _, ok := metrics.Winner(points); ok {
		return w.ID, nil
	}
	return initial, nil
}

// num reads a number from a stage summary.
var num = storage.SummaryNumber
