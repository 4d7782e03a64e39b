package schedule

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline/spec"
)

// Small sizes keep the arithmetic readable: 40 training tasks in batches
// of 8 are 5 steps per epoch; a step is 8×2 = 16 rollouts; the search set
// of 4 makes the first iteration of a phase 4 rollouts and every later one
// 3×4 = 12; the test is 10 tasks × k 2 = 20 rollouts.
const (
	trainSize  = 40
	testSize   = 10
	stepCost   = 16
	firstCost  = 4
	iterCost   = 12
	testCostTS = 20
)

func experiment(schedule string, edit func(*spec.Experiment)) *spec.Experiment {
	e := spec.Defaults()
	e.Name = "t"
	e.Domain = "demo"
	e.Schedule = schedule
	e.RSFT.BatchSize = 8
	e.RSFT.GroupSize = 2
	e.Harness.SearchSetSize = 4
	e.Harness.SamplesPerCandidate = 1
	e.Harness.CandidatesPerIteration = 3
	e.Eval.K = 2
	if edit != nil {
		edit(&e)
	}
	e.Normalize()
	return &e
}

func inputs(e *spec.Experiment) Inputs {
	return Inputs{Experiment: e, TrainSize: trainSize, TestSize: testSize, SearchSize: 100}
}

// signals feed a simulated run: the mean reward of weight step index of
// phase ph, and the best search score after harness iteration index.
type signals struct {
	reward func(ph, index int) float64
	score  func(ph, index int) float64
	// dry, when set, says harness iteration index of phase ph proposed no
	// valid candidate: it ran no rollouts and scored nothing.
	dry func(ph, index int) bool
}

// dryFrom makes every harness iteration from index on come back empty.
func dryFrom(index int) func(int, int) bool { return func(_, i int) bool { return i >= index } }

func constant(v float64) func(int, int) float64 { return func(int, int) float64 { return v } }

// seq returns v[index-1], repeating the last value past the end.
func seq(v ...float64) func(int, int) float64 {
	return func(_, index int) float64 { return v[min(index, len(v))-1] }
}

var flat = signals{reward: constant(0.5), score: constant(0.5)}

// simulate runs the planner to done, feeding each decision back as a
// completed unit with the synthetic signals, and returns the positions in
// compact form (see compact) and the units.
func simulate(t *testing.T, in Inputs, sg signals) (string, History) {
	t.Helper()
	pl, err := New(in)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var h History
	var pos []string
	for range 10000 {
		d, err := pl.Next(h)
		if err != nil {
			t.Fatalf("Next after %d units: %v", len(h), err)
		}
		// Determinism: a fresh planner on the same history agrees.
		again, err := Next(in, h)
		if err != nil || !reflect.DeepEqual(d, again) {
			t.Fatalf("Next is not deterministic after %d units:\n%+v\n%+v (%v)", len(h), d, again, err)
		}
		if d.Reason == "" {
			t.Fatalf("decision %+v has no reason", d)
		}
		if d.Kind == KindDone {
			pos = append(pos, "done")
			return compact(pos), h
		}
		pos = append(pos, d.Position)
		u := Unit{Kind: d.Kind, Phase: d.Phase, Index: d.Index, Rollouts: d.Rollouts}
		switch d.Kind {
		case KindWeight:
			u.MeanReward = sg.reward(d.Phase, d.Index)
		case KindHarness:
			u.BestScore = sg.score(d.Phase, d.Index)
			u.Perfect = u.BestScore >= 1
			if sg.dry != nil && sg.dry(d.Phase, d.Index) {
				u.Rollouts, u.BestScore, u.Perfect = 0, 0, false
			}
		}
		h = append(h, u)
	}
	t.Fatalf("no done after 10000 units: %s", compact(pos))
	return "", nil
}

// compact writes runs of steps or iterations of one phase as
// "r001-w01..03".
func compact(pos []string) string {
	var out []string
	for i := 0; i < len(pos); {
		j := i
		p, err := ParsePosition(pos[i])
		if err == nil && (p.Section == SectionWeight || p.Section == SectionHarness) {
			for j+1 < len(pos) {
				q, err := ParsePosition(pos[j+1])
				if err != nil || q.Round != p.Round || q.Section != p.Section || q.Index != p.Index+(j+1-i) {
					break
				}
				j++
			}
		}
		if j > i {
			last, _ := ParsePosition(pos[j])
			out = append(out, fmt.Sprintf("%s..%02d", pos[i], last.Index))
		} else {
			out = append(out, pos[i])
		}
		i = j + 1
	}
	return strings.Join(out, " ")
}

func spent(h History) (train, test int64) {
	for _, u := range h {
		if u.Kind == KindTest {
			test += u.Rollouts
		} else {
			train += u.Rollouts
		}
	}
	return train, test
}

func fixed(epochs float64, iterations int) func(*spec.Experiment) {
	return func(e *spec.Experiment) {
		e.Switch.Mode = spec.SwitchFixed
		e.Switch.Fixed = spec.FixedSwitch{Epochs: epochs, Iterations: iterations}
	}
}

func with(edits ...func(*spec.Experiment)) func(*spec.Experiment) {
	return func(e *spec.Experiment) {
		for _, f := range edits {
			f(e)
		}
	}
}

func budget(b spec.Budget) func(*spec.Experiment) {
	return func(e *spec.Experiment) { e.Budget = b }
}

func noTests(e *spec.Experiment) { e.Eval.TestEveryPhase = false }

// patience sets the weight side in epochs (5 steps per epoch here) and the
// harness side in iterations.
func patience(window, burnIn, pat float64, hMin, hPat, hCap int) func(*spec.Experiment) {
	return func(e *spec.Experiment) {
		e.Switch.Mode = spec.SwitchPatience
		e.Switch.Patience = spec.PatienceSwitch{Window: window, BurnIn: burnIn, Patience: pat,
			HarnessMin: hMin, HarnessPatience: hPat, HarnessCap: hCap}
	}
}

func TestSimulatedRuns(t *testing.T) {
	// (0.6 epoch, 3 iterations): 3 steps per weight phase.
	fx := fixed(0.6, 3)
	tests := []struct {
		name     string
		schedule string
		edit     func(*spec.Experiment)
		sig      signals
		testSize int
		want     string
	}{
		{"whale fixed, weight_steps ends mid-phase", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{WeightSteps: 7})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..03 r001-ht r002-w01..03 r002-wt r002-h01..03 r002-ht r003-w01 r003-wt done"},
		{"whale fixed, budget at a phase boundary: no harness phase after the last weight phase", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{WeightSteps: 6})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..03 r001-ht r002-w01..03 r002-wt done"},
		{"whale fixed, only the final pair tested", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{WeightSteps: 7}), noTests), flat, testSize,
			"r001-w01..03 r001-h01..03 r002-w01..03 r002-h01..03 r003-w01 r003-wt done"},
		{"whale fixed, no test set and no tests", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{WeightSteps: 4}), noTests), flat, 0,
			"r001-w01..03 r001-h01..03 r002-w01 done"},
		{"whale fixed, budget.epochs 1.2 = 6 steps", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{Epochs: 1.2})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..03 r001-ht r002-w01..03 r002-wt done"},
		{"whale fixed, the smaller of weight_steps and epochs", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{WeightSteps: 10, Epochs: 0.8})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..03 r001-ht r002-w01 r002-wt done"},
		{"whale fixed, harness_iterations cut a phase and end the run after the next weight phase", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{WeightSteps: 20, HarnessIterations: 4})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..03 r001-ht r002-w01..03 r002-wt r002-h01 r002-ht r003-w01..03 r003-wt done"},
		// 48 per weight phase, 4+12+12 per harness phase.
		{"whale fixed, rollouts: every unit fits exactly", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{Rollouts: 124})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..03 r001-ht r002-w01..03 r002-wt done"},
		{"whale fixed, rollouts: one short stops before the unit", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{Rollouts: 123})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..03 r001-ht r002-w01..02 r002-wt done"},
		{"whale fixed, rollouts: harness phase keeps one weight step", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{Rollouts: 80})), flat, testSize,
			"r001-w01..03 r001-wt r001-h01..02 r001-ht r002-w01 r002-wt done"},
		{"whale fixed, rollouts: no room for a harness phase and a step", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{Rollouts: 67})), flat, testSize,
			"r001-w01..03 r001-wt done"},
		{"whale, rollouts below one step: the initial pair is tested", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{Rollouts: 15})), flat, testSize,
			"r000-t done"},
		{"whale, rollouts below one step, no test set", spec.ScheduleWhale,
			with(fx, budget(spec.Budget{Rollouts: 15}), noTests), flat, 0,
			"done"},
		{"whale fixed, perfect score ends the harness phase", spec.ScheduleWhale,
			with(fixed(0.4, 5), budget(spec.Budget{WeightSteps: 4})), signals{reward: constant(0.5), score: seq(0.5, 0.8, 1)}, testSize,
			"r001-w01..02 r001-wt r001-h01..03 r001-ht r002-w01..02 r002-wt done"},

		// Patience, 5 steps per epoch: window 0.4 = 2 steps, burn-in 0.4 =
		// 2, patience 0.6 = 3; harness min 3, patience 2, cap 6.
		{"whale patience, plateau equal to the best does not reset patience", spec.ScheduleWhale,
			with(patience(0.4, 0.4, 0.6, 3, 2, 6), budget(spec.Budget{WeightSteps: 9})),
			signals{reward: seq(0.1, 0.2, 0.3, 0.3, 0.3), score: constant(0.5)}, testSize,
			// best window mean 0.3 at step 4 (0.3,0.3); 5, 6, 7 equal; stop
			// after 7. Phase 2 rises again until the budget's last 2 steps.
			"r001-w01..07 r001-wt r001-h01..03 r001-ht r002-w01..02 r002-wt done"},
		{"whale patience, burn-in holds a falling phase", spec.ScheduleWhale,
			with(patience(0.2, 0.8, 0.2, 1, 1, 1), budget(spec.Budget{WeightSteps: 6})),
			signals{reward: seq(0.9, 0.8, 0.7, 0.6, 0.5, 0.4), score: constant(0.5)}, testSize,
			// best at step 1, patience 1: stops at the first step past burn-in 4
			"r001-w01..05 r001-wt r001-h01 r001-ht r002-w01 r002-wt done"},
		{"whale patience, rising rewards run to the budget", spec.ScheduleWhale,
			with(patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 12})),
			signals{reward: func(_, i int) float64 { return float64(i) / 100 }, score: constant(0.5)}, testSize,
			"r001-w01..12 r001-wt done"},
		// Weight phases of 2 steps (flat rewards, window = burn-in =
		// patience = 1 step); harness: min 3, patience 2, cap 6.
		{"whale patience, harness flat stops at min", spec.ScheduleWhale,
			with(patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 3})), flat, testSize,
			"r001-w01..02 r001-wt r001-h01..03 r001-ht r002-w01 r002-wt done"},
		{"whale patience, harness improving then flat", spec.ScheduleWhale,
			with(patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 3})),
			signals{reward: constant(0.5), score: seq(0.5, 0.6, 0.7)}, testSize,
			"r001-w01..02 r001-wt r001-h01..05 r001-ht r002-w01 r002-wt done"},
		{"whale patience, harness plateau equal to the best", spec.ScheduleWhale,
			with(patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 3})),
			signals{reward: constant(0.5), score: seq(0.5, 0.6)}, testSize,
			"r001-w01..02 r001-wt r001-h01..04 r001-ht r002-w01 r002-wt done"},
		{"whale patience, harness cap", spec.ScheduleWhale,
			with(patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 3})),
			signals{reward: constant(0.5), score: func(_, i int) float64 { return float64(i) / 10 }}, testSize,
			"r001-w01..02 r001-wt r001-h01..06 r001-ht r002-w01 r002-wt done"},
		{"whale patience, perfect score before min", spec.ScheduleWhale,
			with(patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 3})),
			signals{reward: constant(0.5), score: seq(0.5, 1)}, testSize,
			"r001-w01..02 r001-wt r001-h01..02 r001-ht r002-w01 r002-wt done"},
		{"whale patience, the incoming harness is already perfect", spec.ScheduleWhale,
			with(patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 3})),
			signals{reward: constant(0.5), score: constant(1)}, testSize,
			"r001-w01..02 r001-wt r001-h01 r001-ht r002-w01 r002-wt done"},

		{"weights-only, test segments of the fixed length", spec.ScheduleWeightsOnly,
			with(fx, budget(spec.Budget{WeightSteps: 7})), flat, testSize,
			"r001-w01..03 r001-wt r002-w01..03 r002-wt r003-w01 r003-wt done"},
		{"weights-only ignores the patience block", spec.ScheduleWeightsOnly,
			with(fx, patience(0.2, 0.2, 0.2, 3, 2, 6), budget(spec.Budget{WeightSteps: 7}), noTests), flat, testSize,
			"r001-w01..03 r002-w01..03 r003-w01 r003-wt done"},
		{"weights-only without a fixed length is one phase", spec.ScheduleWeightsOnly,
			with(fixed(0, 1), budget(spec.Budget{Epochs: 1.4})), flat, testSize,
			"r001-w01..07 r001-wt done"},
		{"weights-only, rollouts", spec.ScheduleWeightsOnly,
			with(fixed(1, 1), budget(spec.Budget{Rollouts: 100})), flat, testSize,
			"r001-w01..05 r001-wt r002-w01 r002-wt done"},
		{"harness-only, harness_iterations", spec.ScheduleHarnessOnly,
			budget(spec.Budget{HarnessIterations: 5}), flat, testSize,
			"r001-h01..05 r001-ht done"},
		{"harness-only ignores the switch rule", spec.ScheduleHarnessOnly,
			with(fixed(0.6, 2), budget(spec.Budget{HarnessIterations: 5})), flat, testSize,
			"r001-h01..05 r001-ht done"},
		{"harness-only, rollouts", spec.ScheduleHarnessOnly,
			budget(spec.Budget{Rollouts: 40}), flat, testSize,
			"r001-h01..04 r001-ht done"},
		{"harness-only, a dry proposer ends the phase under a rollouts budget", spec.ScheduleHarnessOnly,
			budget(spec.Budget{Rollouts: 1000}), signals{score: constant(0.5), dry: dryFrom(3)}, testSize,
			"r001-h01..05 r001-ht done"},
		{"harness-only, one empty iteration is not a dry proposer", spec.ScheduleHarnessOnly,
			budget(spec.Budget{Rollouts: 40}), signals{score: constant(0.5), dry: func(_, i int) bool { return i == 2 }}, testSize,
			"r001-h01..05 r001-ht done"},
		{"whale fixed, a dry proposer ends the harness phase early", spec.ScheduleWhale,
			with(fixed(0.2, 8), budget(spec.Budget{WeightSteps: 2})), signals{reward: constant(0.5), score: constant(0.5), dry: dryFrom(2)}, testSize,
			"r001-w01 r001-wt r001-h01..04 r001-ht r002-w01 r002-wt done"},
		{"harness-only, perfect score", spec.ScheduleHarnessOnly,
			budget(spec.Budget{HarnessIterations: 10}), signals{score: seq(0.2, 0.4, 1)}, testSize,
			"r001-h01..03 r001-ht done"},
		{"stagewise, weight_steps then harness_iterations", spec.ScheduleStagewise,
			with(fx, budget(spec.Budget{WeightSteps: 5, HarnessIterations: 3})), flat, testSize,
			"r001-w01..05 r001-wt r001-h01..03 r001-ht done"},
		{"stagewise, rollouts keep the harness stage", spec.ScheduleStagewise,
			// 4 steps (64) + 4+12+12 = 92 ≤ 100; a fifth step would leave 20 < 28
			budget(spec.Budget{Rollouts: 100, HarnessIterations: 3}), flat, testSize,
			"r001-w01..04 r001-wt r001-h01..03 r001-ht done"},
		{"stagewise, rollouts only", spec.ScheduleStagewise,
			// without harness_iterations only the first iteration (4) is
			// kept: 4 steps (64), then 68 ≤ 79 but 68+12 > 79
			with(budget(spec.Budget{Rollouts: 79}), noTests), flat, testSize,
			"r001-w01..04 r001-h01 r001-ht done"},
	}
	for _, tt := range tests {
		schedules := []string{tt.schedule}
		if tt.schedule == spec.ScheduleWhale {
			schedules = append(schedules, spec.ScheduleFST) // FST plans exactly like WHALE
		}
		for _, sch := range schedules {
			t.Run(sch+"/"+tt.name, func(t *testing.T) {
				e := experiment(sch, tt.edit)
				in := inputs(e)
				in.TestSize = tt.testSize
				got, h := simulate(t, in, tt.sig)
				if got != tt.want {
					t.Errorf("positions\n got %s\nwant %s", got, tt.want)
				}
				train, test := spent(h)
				if b := e.Budget.Rollouts; b > 0 && train > b {
					t.Errorf("spent %d rollouts, budget %d", train, b)
				}
				if tests := int64(strings.Count(got, "t ")); test != tests*testCostTS {
					t.Errorf("test rollouts %d, want %d tests × %d", test, tests, testCostTS)
				}
			})
		}
	}
}

// TestAlternationInvariants sweeps budgets: whale never spends past
// budget.rollouts, its last training unit is always a weight step, every
// harness phase is followed by a weight phase, and the final pair is
// tested exactly once.
func TestAlternationInvariants(t *testing.T) {
	for _, mode := range []func(*spec.Experiment){fixed(0.6, 3), patience(0.4, 0.2, 0.4, 2, 1, 4)} {
		for rollouts := int64(0); rollouts <= 400; rollouts += 7 {
			for steps := 0; steps <= 9; steps += 3 {
				if rollouts == 0 && steps == 0 {
					continue
				}
				for _, every := range []bool{true, false} {
					e := experiment(spec.ScheduleWhale, with(mode, budget(spec.Budget{WeightSteps: steps, Rollouts: rollouts}),
						func(e *spec.Experiment) { e.Eval.TestEveryPhase = every }))
					sg := signals{reward: seq(0.1, 0.3, 0.3, 0.2), score: seq(0.4, 0.5, 0.5)}
					got, h := simulate(t, inputs(e), sg)
					train, _ := spent(h)
					if rollouts > 0 && train > rollouts {
						t.Fatalf("rollouts %d steps %d: spent %d: %s", rollouts, steps, train, got)
					}
					var lastTrain Kind
					tested := map[int]int{}
					for i, u := range h {
						if u.Kind == KindTest {
							tested[u.Phase]++
							continue
						}
						lastTrain = u.Kind
						if u.Kind == KindHarness && u.Index == 1 && (i == 0 || h[i-1].Kind == KindHarness) {
							t.Fatalf("harness phase %d does not follow a weight phase: %s", u.Phase, got)
						}
					}
					if lastTrain == KindHarness {
						t.Fatalf("rollouts %d steps %d: run ends with a harness phase: %s", rollouts, steps, got)
					}
					if len(h) == 0 || h[len(h)-1].Kind != KindTest {
						t.Fatalf("rollouts %d steps %d: final pair not tested: %s", rollouts, steps, got)
					}
					for ph, n := range tested {
						if n != 1 {
							t.Fatalf("phase %d tested %d times: %s", ph, n, got)
						}
					}
				}
			}
		}
	}
}
