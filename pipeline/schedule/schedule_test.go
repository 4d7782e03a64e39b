package schedule

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline/spec"
)

func TestArithmetic(t *testing.T) {
	paper := spec.Defaults()
	tests := []struct {
		name      string
		got, want int64
	}{
		{"steps per epoch 17000/256", int64(StepsPerEpoch(17000, 256)), 67},
		{"steps per epoch exact", int64(StepsPerEpoch(512, 256)), 2},
		{"steps per epoch batch larger than split", int64(StepsPerEpoch(100, 256)), 1},
		{"steps per epoch empty", int64(StepsPerEpoch(0, 256)), 0},
		{"0.6 epoch of 67 steps", int64(EpochsToSteps(0.6, 67)), 40},
		{"0.2 epoch of 67 steps", int64(EpochsToSteps(0.2, 67)), 13},
		{"half rounds away from zero", int64(EpochsToSteps(0.5, 5)), 3},
		{"at least one step", int64(EpochsToSteps(0.01, 5)), 1},
		{"zero epochs is one step", int64(EpochsToSteps(0, 5)), 1},
		{"NaN is one step", int64(EpochsToSteps(math.NaN(), 5)), 1},
		{"paper weight step", WeightStepRollouts(&paper), 2048},
		{"paper first iteration", HarnessIterationRollouts(&paper, 256, 1), 256},
		{"paper later iteration", HarnessIterationRollouts(&paper, 256, 2), 768},
		{"smaller search set", HarnessIterationRollouts(&paper, 100, 5), 300},
		{"paper harness phase of 6", HarnessPhaseRollouts(&paper, 256, 6), 256 + 5*768},
		{"empty harness phase", HarnessPhaseRollouts(&paper, 256, 0), 0},
		{"test mean@8 of 500", TestRollouts(500, 8), 4000},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

func TestParamsPaperDefaults(t *testing.T) {
	e := spec.Defaults()
	e.Name, e.Domain = "paper", "searchqa"
	e.Budget.Epochs = 3
	e.Normalize()
	pl, err := New(Inputs{Experiment: &e, TrainSize: 17000, TestSize: 500, SearchSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got := pl.Params()
	want := Params{
		Schedule: "whale", Mode: "fixed", StepsPerEpoch: 67, PhaseSteps: 40, PhaseIterations: 6,
		MaxWeightSteps: 201, SearchSize: 256, StepRollouts: 2048, FirstIterationRollouts: 256,
		IterationRollouts: 768, TestRollouts: 4000, Tests: true, TestEveryPhase: true,
	}
	if got != want {
		t.Errorf("params\n got %+v\nwant %+v", got, want)
	}

	e.Switch.Mode = spec.SwitchPatience
	pl, err = New(Inputs{Experiment: &e, TrainSize: 17000, TestSize: 500, SearchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	p := pl.Params()
	if p.Window != 13 || p.BurnIn != 13 || p.Patience != 13 || p.HarnessMin != 6 || p.HarnessPatience != 2 || p.HarnessCap != 15 {
		t.Errorf("patience params %+v", p)
	}
	if p.SearchSize != 100 || p.FirstIterationRollouts != 100 || p.IterationRollouts != 300 {
		t.Errorf("a smaller available search set must size the iterations: %+v", p)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		in   func() Inputs
		want string
	}{
		{"no experiment", func() Inputs { return Inputs{} }, "no experiment"},
		{"empty train split", func() Inputs {
			in := inputs(experiment(spec.ScheduleWhale, budget(spec.Budget{WeightSteps: 3})))
			in.TrainSize = 0
			return in
		}, "training split is empty"},
		{"test every phase without a test split", func() Inputs {
			in := inputs(experiment(spec.ScheduleWhale, budget(spec.Budget{WeightSteps: 3})))
			in.TestSize = 0
			return in
		}, "test split is empty"},
		{"unbounded weight training", func() Inputs {
			return inputs(experiment(spec.ScheduleWeightsOnly, budget(spec.Budget{})))
		}, "weight training never ends"},
		{"unbounded harness-only", func() Inputs {
			return inputs(experiment(spec.ScheduleHarnessOnly, budget(spec.Budget{})))
		}, "harness search never ends"},
		{"unknown schedule", func() Inputs {
			return inputs(experiment("sometimes", budget(spec.Budget{WeightSteps: 3})))
		}, `schedule "sometimes"`},
		{"bad fixed switch", func() Inputs {
			return inputs(experiment(spec.ScheduleWhale, with(fixed(0, 0), budget(spec.Budget{WeightSteps: 3}))))
		}, "switch.fixed.epochs"},
		{"bad harness patience", func() Inputs {
			return inputs(experiment(spec.ScheduleFST, with(patience(0.2, 0.2, 0.2, 6, 2, 3), budget(spec.Budget{WeightSteps: 3}))))
		}, "harness_cap 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.in())
			if err == nil || !errors.Is(err, ErrInputs) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want ErrInputs containing %q", err, tt.want)
			}
		})
	}
}

func TestNextFirstDecisions(t *testing.T) {
	tests := []struct {
		schedule string
		kind     Kind
		position string
		rollouts int64
	}{
		{spec.ScheduleWhale, KindWeight, "r001-w01", stepCost},
		{spec.ScheduleFST, KindWeight, "r001-w01", stepCost},
		{spec.ScheduleWeightsOnly, KindWeight, "r001-w01", stepCost},
		{spec.ScheduleStagewise, KindWeight, "r001-w01", stepCost},
		{spec.ScheduleHarnessOnly, KindHarness, "r001-h01", firstCost},
	}
	for _, tt := range tests {
		e := experiment(tt.schedule, budget(spec.Budget{WeightSteps: 3, HarnessIterations: 3}))
		d, err := Next(inputs(e), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.schedule, err)
		}
		if d.Kind != tt.kind || d.Position != tt.position || d.Rollouts != tt.rollouts || d.Phase != 0 || d.Round != 1 || d.Index != 1 {
			t.Errorf("%s: first decision %+v, want %s %s costing %d", tt.schedule, d, tt.kind, tt.position, tt.rollouts)
		}
	}
}

// TestPatienceReason checks the line and signals `whale plan` shows when
// patience ends a weight phase.
func TestPatienceReason(t *testing.T) {
	e := experiment(spec.ScheduleWhale, with(patience(0.4, 0.4, 0.4, 3, 2, 6), budget(spec.Budget{WeightSteps: 20})))
	var h History
	for i, r := range []float64{0.4, 0.412, 0.412, 0.3, 0.3} {
		h = append(h, Unit{Kind: KindWeight, Phase: 0, Index: i + 1, Rollouts: stepCost, MeanReward: r})
	}
	d, err := Next(inputs(e), h)
	if err != nil {
		t.Fatal(err)
	}
	// window 2: means 0.4, 0.406, 0.412 (best, step 3), 0.356, 0.3: two
	// steps since best ≥ patience 2, past burn-in 2.
	if d.Kind != KindTest || d.Position != "r001-wt" {
		t.Fatalf("decision %+v, want the test after the weight phase", d)
	}
	want := "patience: 2 steps since best window mean 0.412 (window 2, burn-in 2, patience 2)"
	if !strings.Contains(d.Reason, want) {
		t.Errorf("reason %q, want it to contain %q", d.Reason, want)
	}
	for k, v := range map[string]float64{"steps_since_best": 2, "best_step": 3, "steps_in_phase": 5, "burn_in": 2,
		"patience": 2, "window": 2, "rollouts_spent": 5 * stepCost, "weight_steps_done": 5, "weight_steps_budget": 20} {
		if d.Signals[k] != v {
			t.Errorf("signal %s = %v, want %v (all: %v)", k, d.Signals[k], v, d.Signals)
		}
	}
	if math.Abs(d.Signals["best_window_mean"]-0.412) > 1e-12 || math.Abs(d.Signals["window_mean"]-0.3) > 1e-12 {
		t.Errorf("window signals %v", d.Signals)
	}
	if _, err := json.Marshal(d); err != nil {
		t.Errorf("decision does not encode: %v", err)
	}
}

// TestPatienceRoundingIsNotProgress: a window mean one ulp above the best
// is the plateau, not an improvement.
func TestPatienceRoundingIsNotProgress(t *testing.T) {
	e := experiment(spec.ScheduleWhale, with(patience(0.2, 0.2, 0.4, 3, 2, 6), budget(spec.Budget{WeightSteps: 20})))
	up := math.Nextafter(0.5, 1)
	var h History
	for i, r := range []float64{0.5, 0.5, up} {
		h = append(h, Unit{Kind: KindWeight, Phase: 0, Index: i + 1, Rollouts: stepCost, MeanReward: r})
	}
	d, err := Next(inputs(e), h)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != KindTest || d.Signals["best_step"] != 1 {
		t.Errorf("after 0.5, 0.5, 0.5+ulp (window 1, patience 2): %+v; want the phase to end with the best at step 1", d)
	}
	h[2].MeanReward = 0.5001
	if d, _ = Next(inputs(e), h); d.Kind != KindWeight || d.Index != 4 {
		t.Errorf("a real improvement must reset patience: %+v", d)
	}
}

func TestHarnessScoresFoldIntoBest(t *testing.T) {
	// A caller that records only the iteration's scores gets the same plan.
	e := experiment(spec.ScheduleWhale, with(patience(0.2, 0.2, 0.2, 2, 1, 6), budget(spec.Budget{WeightSteps: 3}), noTests))
	base := History{
		{Kind: KindWeight, Phase: 0, Index: 1, Rollouts: stepCost, MeanReward: 0.5},
		{Kind: KindWeight, Phase: 0, Index: 2, Rollouts: stepCost, MeanReward: 0.5},
	}
	withBest := append(append(History{}, base...),
		Unit{Kind: KindHarness, Phase: 1, Index: 1, Rollouts: firstCost, BestScore: 0.5},
		Unit{Kind: KindHarness, Phase: 1, Index: 2, Rollouts: iterCost, BestScore: 0.7})
	withScores := append(append(History{}, base...),
		Unit{Kind: KindHarness, Phase: 1, Index: 1, Rollouts: firstCost, Scores: []float64{0.5}},
		Unit{Kind: KindHarness, Phase: 1, Index: 2, Rollouts: iterCost, Scores: []float64{0.2, 0.7, 0.6}})
	a, errA := Next(inputs(e), withBest)
	b, errB := Next(inputs(e), withScores)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !reflect.DeepEqual(a, b) || a.Kind != KindHarness || a.Index != 3 {
		t.Errorf("best-score history %+v\nscores history %+v\nwant both: harness iteration 3", a, b)
	}
	withScores[3].Scores = []float64{0.2, 1.0}
	if d, _ := Next(inputs(e), withScores); d.Kind != KindWeight || d.Position != "r002-w01" || !strings.Contains(d.Reason, "scored 1.0") {
		t.Errorf("a score of 1.0 must end the harness phase: %+v", d)
	}
}

func TestHistoryErrors(t *testing.T) {
	e := experiment(spec.ScheduleWhale, with(fixed(0.4, 2), budget(spec.Budget{WeightSteps: 2})))
	w := func(i int) Unit {
		return Unit{Kind: KindWeight, Phase: 0, Index: i, Rollouts: stepCost, MeanReward: 0.5}
	}
	done := History{w(1), w(2), {Kind: KindTest, Phase: 0, Rollouts: testCostTS}}
	tests := []struct {
		name string
		h    History
		at   int
		want string
	}{
		{"harness first", History{{Kind: KindHarness, Phase: 0, Index: 1}}, 0, "plan says weight r001-w01"},
		{"skipped step", History{w(1), w(3)}, 1, "plan says weight r001-w02"},
		{"wrong phase", History{w(1), {Kind: KindWeight, Phase: 1, Index: 2}}, 1, "phase 1"},
		{"harness instead of the test", History{w(1), w(2), {Kind: KindHarness, Phase: 1, Index: 1}}, 2, "plan says test r001-wt"},
		{"unit after done", append(append(History{}, done...), w(3)), 3, "plan says done"},
		{"NaN reward", History{{Kind: KindWeight, Phase: 0, Index: 1, MeanReward: math.NaN()}}, 0, "mean_reward is NaN"},
		{"negative rollouts", History{{Kind: KindWeight, Phase: 0, Index: 1, Rollouts: -1}}, 0, "rollouts -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Next(inputs(e), tt.h)
			var he *HistoryError
			if !errors.As(err, &he) || !errors.Is(err, ErrHistory) {
				t.Fatalf("Next: %v, want a *HistoryError", err)
			}
			if he.At != tt.at || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q at %d, want at %d containing %q", err, he.At, tt.at, tt.want)
			}
		})
	}
	d, err := Next(inputs(e), done)
	if err != nil || d.Kind != KindDone || d.Position != "" {
		t.Errorf("complete history: %+v, %v; want done", d, err)
	}
}

// TestActualRolloutsCount: the budget follows what units really cost, not
// what the planner expected.
func TestActualRolloutsCount(t *testing.T) {
	e := experiment(spec.ScheduleWeightsOnly, with(fixed(10, 1), budget(spec.Budget{Rollouts: 45})))
	h := History{{Kind: KindWeight, Phase: 0, Index: 1, Rollouts: 30, MeanReward: 0.5}}
	d, err := Next(inputs(e), h)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != KindTest || !strings.Contains(d.Reason, "30 spent + 16 for a weight step > 45") {
		t.Errorf("decision %+v", d)
	}
	h[0].Rollouts = 29
	if d, _ := Next(inputs(e), h); d.Kind != KindWeight || d.Signals["rollouts_spent"] != 29 {
		t.Errorf("29 spent of 45 leaves room for a step of 16: %+v", d)
	}
}

func TestTestRolloutsAreNotBudget(t *testing.T) {
	// Tests after every phase cost 20 each; a budget of 48 still buys three
	// steps.
	e := experiment(spec.ScheduleWeightsOnly, with(fixed(0.2, 1), budget(spec.Budget{Rollouts: 48})))
	got, h := simulate(t, inputs(e), flat)
	if want := "r001-w01 r001-wt r002-w01 r002-wt r003-w01 r003-wt done"; got != want {
		t.Errorf("positions\n got %s\nwant %s", got, want)
	}
	if _, test := spent(h); test != 3*testCostTS {
		t.Errorf("test rollouts %d", test)
	}
}

func TestNoSideEffects(t *testing.T) {
	e := experiment(spec.ScheduleWhale, with(fixed(0.6, 3), budget(spec.Budget{WeightSteps: 7})))
	before := e.Clone()
	pl, err := New(inputs(e))
	if err != nil {
		t.Fatal(err)
	}
	e.Switch.Fixed.Epochs = 5 // the planner keeps its own copy
	h := History{{Kind: KindWeight, Phase: 0, Index: 1, Rollouts: stepCost, MeanReward: 0.5}}
	hc := append(History{}, h...)
	a, _ := pl.Next(h)
	b, _ := pl.Next(h)
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(h, hc) {
		t.Errorf("Next is not pure: %+v vs %+v", a, b)
	}
	if a.Signals["phase_steps"] != 3 {
		t.Errorf("planner saw a later edit of the experiment: %v", a.Signals)
	}
	if diff := spec.Diff(before, func() *spec.Experiment { c := e.Clone(); c.Switch.Fixed.Epochs = 0.6; return c }()); len(diff) != 0 {
		t.Errorf("New changed the experiment: %v", diff)
	}
}

func BenchmarkNextLongRun(b *testing.B) {
	e := experiment(spec.ScheduleWhale, with(patience(0.4, 0.4, 0.4, 3, 2, 6), budget(spec.Budget{WeightSteps: 400})))
	in := inputs(e)
	pl, err := New(in)
	if err != nil {
		b.Fatal(err)
	}
	var h History
	for {
		d, err := pl.Next(h)
		if err != nil {
			b.Fatal(err)
		}
		if d.Kind == KindDone {
			break
		}
		h = append(h, Unit{Kind: d.Kind, Phase: d.Phase, Index: d.Index, Rollouts: d.Rollouts,
			MeanReward: float64(d.Index%5) / 10, BestScore: 0.5})
	}
	for b.Loop() {
		if _, err := pl.Next(h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(h)), "units")
}
