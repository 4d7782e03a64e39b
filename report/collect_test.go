package report

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/storage"
)

// Hand-made stage summaries, shaped as the stages write them.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// stage is a committed stage at pos that ran for a second, ending sec
// seconds after t0.
type stage struct {
	name    string
	sec     int
	summary map[string]any
}

func asMap(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func rollout(t testing.TB, episodes int, reward float64, harness string) stage {
	return stage{name: "rollout", summary: asMap(t, map[string]any{"episodes": episodes, "mean_reward": reward, "harness_id": harness})}
}

func filtered(t testing.TB, episodes, accepted int) stage {
	return stage{name: "filter", summary: asMap(t, map[string]any{"episodes": episodes, "accepted": accepted,
		"acceptance_rate": float64(accepted) / float64(episodes), "reward_sum": float64(accepted), "tasks": episodes / 2,
		"mean_reward": float64(accepted) / float64(episodes)})}
}

func finetuned(t testing.TB, model string) stage {
	return stage{name: "finetune", summary: asMap(t, map[string]any{"model_id": model, "trained": true, "train_loss_last": 0.5})}
}

// cand is a scored candidate: id, name, success, turns (tasks 0: unscored).
type cand struct {
	id, name       string
	success, turns float64
	tasks          int
}

func evaluated(t testing.TB, mode string, k int, model string, cs ...cand) stage {
	f := evaluate.Frontier{Mode: mode, K: k, ModelName: model}
	for _, c := range cs {
		f.Candidates = append(f.Candidates, evaluate.Score{HarnessID: c.id, Name: c.name, Tasks: c.tasks,
			Episodes: c.tasks * k, Success: c.success, PassAtK: min(1, c.success*1.5), MeanTurns: c.turns})
		f.Episodes += c.tasks * k
	}
	best := -1
	for i, c := range f.Candidates {
		if c.Tasks > 0 && (best < 0 || c.Success > f.Candidates[best].Success ||
			c.Success == f.Candidates[best].Success && c.MeanTurns < f.Candidates[best].MeanTurns) {
			best = i
		}
	}
	if best >= 0 {
		w := f.Candidates[best]
		f.Winner, f.WinnerName, f.BestScore = w.HarnessID, w.Name, w.Success
	}
	return stage{name: "evaluate", summary: asMap(t, f)}
}

func proposed(t testing.TB, valid, rejected int) stage {
	return stage{name: "propose", summary: asMap(t, map[string]any{"valid": valid, "rejected": rejected})}
}

// unit builds a pipeline.Unit as pipeline.Units reads it.
func unit(t testing.TB, pos string, phase int, sec int, stages ...stage) pipeline.Unit {
	t.Helper()
	p, err := schedule.ParsePosition(pos)
	if err != nil {
		t.Fatal(err)
	}
	u := pipeline.Unit{Pos: p, Phase: phase, Stages: map[string]*storage.Manifest{}}
	switch p.Section {
	case schedule.SectionWeight:
		u.Kind = schedule.KindWeight
	case schedule.SectionHarness:
		u.Kind = schedule.KindHarness
	default:
		u.Kind = schedule.KindTest
	}
	for i, st := range stages {
		end := t0.Add(time.Duration(sec+i) * time.Second)
		m := &storage.Manifest{Identity: storage.Identity{Run: "r", Position: pos, Stage: st.name}, Summary: st.summary,
			Started: end.Add(-time.Second), Finished: end, Dir: "runs/r/stages/" + pos + "-" + st.name}
		u.Stages[st.name] = m
		if st.name == "rollout" && u.Kind == schedule.KindWeight || st.name == "evaluate" {
			u.Rollouts = int64(num(st.summary, "episodes"))
		}
	}
	last := map[schedule.Kind]string{schedule.KindWeight: "finetune", schedule.KindHarness: "evaluate", schedule.KindTest: "evaluate"}[u.Kind]
	u.Done = u.Stages[last] != nil
	return u
}

func frozen(t testing.TB, schedule string, body string) *spec.Run {
	t.Helper()
	exp := demoSpec(t, "r", "schedule: "+schedule+"\n"+body)
	run, err := spec.Freeze(exp, "test", t0)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

const h0 = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

func hid(n int) string { return fmt.Sprintf("sha256:%064d", n) }

// build on hand-made units: the rollout accounting, the phases, the test
// curve, the harness frontier and the weight steps of each kind of run.
func TestBuild(t *testing.T) {
	type want struct {
		rollouts, testRollouts int64
		weightSteps, harness   int
		// before/after per unit: "pos before after"
		units  []string
		phases []string // "kind round units start-end done winner"
		tests  []string // "pos x mean"
		// candidates: "pos name on-frontier winner"
		cands []string
		steps []string // "pos step acceptance"
		final string
		notes []string // "pos: note"
	}
	cases := []struct {
		name     string
		schedule string
		body     string
		units    func(t testing.TB) []pipeline.Unit
		want     want
	}{{
		name:     "whale, in progress",
		schedule: "whale",
		body:     "switch: {mode: fixed, fixed: {epochs: 0.5, iterations: 3}}\n",
		units: func(t testing.TB) []pipeline.Unit {
			return []pipeline.Unit{
				unit(t, "r001-w01", 0, 0, rollout(t, 32, 0.1, h0), filtered(t, 32, 4), finetuned(t, "m@1")),
				unit(t, "r001-w02", 0, 10, rollout(t, 32, 0.2, h0), filtered(t, 32, 8), finetuned(t, "m@2")),
				unit(t, "r001-wt", 0, 20, evaluated(t, "test", 2, "m@2", cand{h0, "h0", 0.25, 1, 12})),
				unit(t, "r001-h01", 1, 30, evaluated(t, "search", 1, "m@2", cand{h0, "h0", 0.3, 1, 10})),
				// h02: a better candidate with more turns, one worse, one unscored.
				unit(t, "r001-h02", 1, 40, proposed(t, 3, 0), evaluated(t, "search", 1, "m@2",
					cand{hid(1), "cue", 0.5, 2, 10}, cand{hid(2), "tight", 0.2, 1.5, 10}, cand{hid(3), "broken", 0, 0, 0})),
				// h03: nothing valid was proposed.
				unit(t, "r001-h03", 1, 50, proposed(t, 0, 3), evaluated(t, "search", 1, "m@2")),
				// The test names its harness by short id; the search named it.
				unit(t, "r001-ht", 1, 60, evaluated(t, "test", 2, "m@2", cand{hid(1), "sha256:000000000000", 0.4, 2, 12})),
				unit(t, "r002-w01", 2, 70, rollout(t, 32, 0.3, hid(1)), filtered(t, 32, 16), finetuned(t, "m@3")),
				// In progress: rolled out and filtered, not trained.
				unit(t, "r002-w02", 2, 80, rollout(t, 32, 0.4, hid(1)), filtered(t, 32, 12)),
			}
		},
		want: want{
			// h02 scored two candidates on 10 tasks; the unscored one cost nothing.
			rollouts: 32 + 32 + 10 + 20 + 0 + 32 + 32, testRollouts: 24 + 24, weightSteps: 3, harness: 3,
			units: []string{"r001-w01 0 32", "r001-w02 32 64", "r001-wt 64 64", "r001-h01 64 74", "r001-h02 74 94",
				"r001-h03 94 94", "r001-ht 94 94", "r002-w01 94 126", "r002-w02 126 158"},
			phases: []string{"weight 1 2 0-64 true ", "harness 1 3 64-94 true cue", "weight 2 2 94-158 false "},
			tests:  []string{"r001-wt 64 0.250", "r001-ht 94 0.400"},
			// The frontier is the phase's, not one iteration's: h0 (0.3, 1
			// turn) and cue (0.5, 2 turns) are on it; tight is beaten by h0.
			cands: []string{"r001-h01 h0 true false", "r001-h02 cue true true", "r001-h02 tight false false", "r001-h02 broken false false"},
			steps: []string{"r001-w01 1 0.125", "r001-w02 2 0.250", "r002-w01 3 0.500", "r002-w02 4 0.375"},
			final: "r001-ht cue m@2 k=2",
			notes: []string{"r001-h03: the proposer gave no valid candidate (3 rejected)"},
		},
	}, {
		name:     "weights-only, no tests",
		schedule: "weights-only",
		body:     "eval: {test_every_phase: false}\n",
		units: func(t testing.TB) []pipeline.Unit {
			return []pipeline.Unit{
				unit(t, "r001-w01", 0, 0, rollout(t, 64, 0.1, h0), filtered(t, 64, 8), finetuned(t, "m@1")),
				unit(t, "r001-w02", 0, 10, rollout(t, 64, 0.1, h0), filtered(t, 64, 16), finetuned(t, "m@2")),
			}
		},
		want: want{
			rollouts: 128, weightSteps: 2,
			units:  []string{"r001-w01 0 64", "r001-w02 64 128"},
			phases: []string{"weight 1 2 0-128 true "},
			steps:  []string{"r001-w01 1 0.125", "r001-w02 2 0.250"},
		},
	}, {
		name:     "harness-only",
		schedule: "harness-only",
		body:     "budget: {harness_iterations: 3}\n",
		units: func(t testing.TB) []pipeline.Unit {
			return []pipeline.Unit{
				unit(t, "r001-h01", 0, 0, evaluated(t, "search", 1, "m", cand{h0, "h0", 0.2, 3, 10})),
				// Ties on success: fewer turns wins, then the earlier one.
				unit(t, "r001-h02", 0, 10, proposed(t, 2, 0), evaluated(t, "search", 1, "m",
					cand{hid(1), "short", 0.2, 2, 10}, cand{hid(2), "same", 0.2, 2, 10})),
				unit(t, "r001-ht", 0, 20, evaluated(t, "test", 4, "m", cand{hid(1), "short", 0.3, 2, 12})),
			}
		},
		want: want{
			rollouts: 30, testRollouts: 48, harness: 2,
			units:  []string{"r001-h01 0 10", "r001-h02 10 30", "r001-ht 30 30"},
			phases: []string{"harness 1 2 0-30 true short"},
			tests:  []string{"r001-ht 30 0.300"},
			cands:  []string{"r001-h01 h0 false false", "r001-h02 short true true", "r001-h02 same true false"},
			final:  "r001-ht short m k=4",
		},
	}, {
		name:     "nothing committed",
		schedule: "whale",
		units:    func(testing.TB) []pipeline.Unit { return nil },
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := build("r", frozen(t, tc.schedule, tc.body), tc.units(t))
			if err != nil {
				t.Fatal(err)
			}
			var got want
			got.rollouts, got.testRollouts, got.weightSteps, got.harness = r.Rollouts, r.TestRollouts, r.WeightSteps, r.HarnessIterations
			for _, u := range r.Units {
				got.units = append(got.units, fmt.Sprintf("%s %d %d", u.Position, u.RolloutsBefore, u.RolloutsAfter))
				if u.AcceptanceRate != nil {
					got.steps = append(got.steps, fmt.Sprintf("%s %d %.3f", u.Position, u.Step, *u.AcceptanceRate))
				}
				if u.Note != "" && u.Kind == KindHarness {
					got.notes = append(got.notes, u.Position+": "+u.Note)
				}
			}
			for _, p := range r.Phases {
				got.phases = append(got.phases, fmt.Sprintf("%s %d %d %d-%d %v %s", p.Kind, p.Round, p.Units, p.Start, p.End, p.Done, p.Winner))
			}
			for _, p := range r.Tests {
				got.tests = append(got.tests, fmt.Sprintf("%s %d %.3f", p.Position, p.Rollouts, p.MeanAtK))
			}
			for _, c := range r.Candidates {
				got.cands = append(got.cands, fmt.Sprintf("%s %s %v %v", c.Position, c.Name, c.OnFrontier, c.Winner))
			}
			if r.Final != nil {
				got.final = fmt.Sprintf("%s %s %s k=%d", r.Final.Position, r.Final.Harness, r.Final.Model, r.Final.K)
			}
			check := func(what string, got, want any) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s:\n got %v\nwant %v", what, got, want)
				}
			}
			w := tc.want
			check("rollouts", got.rollouts, w.rollouts)
			check("test rollouts", got.testRollouts, w.testRollouts)
			check("weight steps", got.weightSteps, w.weightSteps)
			check("harness iterations", got.harness, w.harness)
			check("units", got.units, w.units)
			check("phases", got.phases, w.phases)
			check("tests", got.tests, w.tests)
			check("candidates", got.cands, w.cands)
			check("acceptance", got.steps, w.steps)
			check("final", got.final, w.final)
			check("notes", got.notes, w.notes)
			// Times: each unit's stages took a second each.
			if n := len(r.Units); n > 0 {
				if r.Started == nil || r.Finished == nil || r.WallSeconds <= 0 || r.StageSeconds <= 0 {
					t.Errorf("times: started %v finished %v wall %v stage %v", r.Started, r.Finished, r.WallSeconds, r.StageSeconds)
				}
			} else if r.Started != nil || r.Final != nil {
				t.Errorf("an empty run has times or a final test: %+v", r)
			}
			// report.json round-trips.
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var back Run
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if b2, _ := json.Marshal(&back); string(b2) != string(b) {
				t.Errorf("report.json does not round-trip:\n%s\n%s", b, b2)
			}
		})
	}
}

func TestLabel(t *testing.T) {
	cases := []struct{ schedule, body, want string }{
		{"whale", "switch: {mode: fixed, fixed: {epochs: 0.5, iterations: 3}}\n", "r (whale, fixed E=0.5 I=3)"},
		{"whale", "switch: patience\n", "r (whale, patience)"},
		{"fst", "", "r (fst, fixed E=0.6 I=6)"},
		{"weights-only", "", "r (weights-only)"},
		{"harness-only", "budget: {harness_iterations: 2}\n", "r (harness-only)"},
		{"stagewise", "budget: {weight_steps: 4, harness_iterations: 2}\n", "r (stagewise)"},
	}
	for _, tc := range cases {
		r, err := build("r", frozen(t, tc.schedule, tc.body), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Label != tc.want {
			t.Errorf("%s %q: label %q, want %q", tc.schedule, tc.body, r.Label, tc.want)
		}
	}
}

// commit writes a committed stage into s by the storage protocol.
func commit(t testing.TB, s *storage.Store, run, pos string, st stage) {
	t.Helper()
	ctx := context.Background()
	id, err := storage.NewIdentity(run, pos, st.name, nil, map[string]string{"pos": pos}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	one := func(parts []map[string]any) (map[string]any, error) { return parts[0], nil }
	a, err := storage.OpenAttempt(ctx, s, id, storage.AttemptOptions{Merge: one})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := a.NewShard(0)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range st.summary {
		sw.SetSummary(k, v)
	}
	if _, err := sw.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// Collect over a mem:// bucket with hand-committed stages: the units come
// back as pipeline.Units reads them, the planner says the run is in
// progress and what comes next, and a run with no run.json is an error
// that says how to make one.
func TestCollectMem(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	demoData(t, s)
	exp := initRun(t, s, demoSpec(t, "hand", "schedule: whale\nswitch: {mode: fixed, fixed: {epochs: 0.5, iterations: 2}}\nbudget: {rollouts: 500}\n"))
	initRun(t, s, demoSpec(t, "empty", "schedule: weights-only\n"))
	lost := demoSpec(t, "lost", "schedule: weights-only\n")
	lost.Data.Train = "datasets/gone"
	initRun(t, s, lost)
	for _, c := range []struct {
		pos string
		st  stage
	}{
		{"r001-w01", rollout(t, 32, 0.1, h0)}, {"r001-w01", filtered(t, 32, 4)}, {"r001-w01", finetuned(t, "demo-local@1")},
		{"r001-w02", rollout(t, 32, 0.2, h0)},
	} {
		commit(t, s, exp.Name, c.pos, c.st)
	}
	d, err := Collect(ctx, s, []string{"hand", "empty", "hand", "lost"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Runs) != 3 || d.Runs[0].Name != "hand" || d.Runs[1].Name != "empty" || d.Runs[2].Name != "lost" {
		t.Fatalf("runs %v, want hand, empty and lost once each", d.Runs)
	}
	// A run the planner cannot read is still reported, with the reason.
	if l := d.Runs[2]; l.State != StateUnknown || !strings.Contains(l.StateNote, "dataset gone") {
		t.Errorf("lost run: state %q %q, want unknown naming the missing dataset", l.State, l.StateNote)
	}
	r := d.Runs[0]
	if r.State != StateInProgress || !strings.Contains(r.StateNote, "next: filter at r001-w02") {
		t.Errorf("state %q %q, want in progress with the filter next", r.State, r.StateNote)
	}
	if r.Rollouts != 64 || r.WeightSteps != 1 || len(r.Units) != 2 || r.Units[1].Done {
		t.Errorf("rollouts %d, weight steps %d, units %+v", r.Rollouts, r.WeightSteps, r.Units)
	}
	if r.Units[0].Model != "demo-local@1" || r.Units[0].Harness != shortID(h0) {
		t.Errorf("unit 0: model %q harness %q", r.Units[0].Model, r.Units[0].Harness)
	}
	if e := d.Runs[1]; len(e.Units) != 0 || e.State != StateInProgress || !strings.Contains(e.StateNote, "rollout at r001-w01") {
		t.Errorf("empty run: units %v, state %q %q", e.Units, e.State, e.StateNote)
	}
	if !strings.HasPrefix(d.Root, "mem:") || d.WhaleVersion == "" || d.Generated.IsZero() {
		t.Errorf("header: root %q version %q generated %v", d.Root, d.WhaleVersion, d.Generated)
	}

	for _, bad := range [][]string{{"nope"}, {"hand", "../x"}, nil} {
		if _, err := Collect(ctx, s, bad); err == nil {
			t.Errorf("Collect(%q): no error", bad)
		} else if slices.Contains(bad, "nope") && !strings.Contains(err.Error(), "whale init") {
			t.Errorf("Collect(%q): %v; want it to say how to create the run", bad, err)
		}
	}
}
