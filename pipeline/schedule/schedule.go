package schedule

import (
	"errors"
	"fmt"
	"math"

	"github.com/whalerun/whale/pipeline/schedule/schedules"
	"github.com/whalerun/whale/pipeline/spec"
)

// Kind is what a unit of work or a decision is.
type Kind string

// Kinds of units and decisions. KindDone is only ever a decision.
const (
	KindWeight  Kind = "weight"
	KindHarness Kind = "harness"
	KindTest    Kind = "test"
	KindDone    Kind = "done"
)

// Unit is one completed unit of work, as the ledger and the committed
// manifests record it.
type Unit struct {
	Kind Kind `json:"kind"`
	// Phase is the 0-based index of the phase in the run; a test carries
	// the phase it follows (-1 for the test of the initial pair).
	Phase int `json:"phase"`
	// Index is the 1-based step or iteration within the phase; 0 for tests.
	Index int `json:"index"`
	// Rollouts is the target-model rollouts the unit actually ran.
	Rollouts int64 `json:"rollouts"`
	// MeanReward is a weight step's mean training reward.
	MeanReward float64 `json:"mean_reward,omitempty"`
	// BestScore is, for a harness iteration, the best search-set score in
	// the phase archive after it. Scores are the iteration's own scores;
	// they are folded into the best too, so a caller that fills only
	// Scores gets the same decisions.
	BestScore float64   `json:"best_score,omitempty"`
	Scores    []float64 `json:"scores,omitempty"`
	// Perfect says a candidate scored 1.0 (also inferred from a score ≥ 1).
	Perfect bool `json:"perfect,omitempty"`
}

// History is the run's completed units in the order they ran.
type History []Unit

// Decision is what runs next and why.
type Decision struct {
	Kind Kind `json:"kind"`
	// Phase is the 0-based phase the unit belongs to (for a test: the phase
	// it follows; -1 for the initial pair; for done: the last phase, or -1).
	Phase int `json:"phase"`
	// Round is the 1-based alternation round (0 for the initial pair).
	Round int `json:"round"`
	// Index is the 1-based step or iteration within the phase; 0 for
	// tests and done.
	Index int `json:"index"`
	// Position names the unit's stage folders ("r003-w02"); empty for done.
	Position string `json:"position"`
	// Rollouts is what the unit is expected to cost (test rollouts for a
	// test); 0 for done.
	Rollouts int64 `json:"rollouts"`
	// Reason is one human line saying why.
	Reason string `json:"reason"`
	// Signals are the numbers behind Reason, for `whale plan`.
	Signals map[string]float64 `json:"signals"`
}

// Inputs is everything the planner depends on besides the history.
type Inputs struct {
	// Experiment is the run's normalized spec; the planner keeps a copy.
	Experiment *spec.Experiment
	// TrainSize is the number of tasks in the training split.
	TrainSize int
	// TestSize is the number of tasks in the test split; 0 means no test
	// set (then no test units, which requires eval.test_every_phase false).
	TestSize int
	// SearchSize is the number of search-set tasks actually available; the
	// search set is the first min(harness.search_set_size, SearchSize) of
	// them. 0 means "as many as the spec asks".
	SearchSize int
}

// Params are the integers the rules run on, derived once from Inputs.
// Zero in a Max field means no limit.
type Params struct {
	Schedule string `json:"schedule"`
	Mode     string `json:"mode"`

	StepsPerEpoch int `json:"steps_per_epoch"`
	// PhaseSteps is the length of a fixed weight phase (whale/fst with
	// switch fixed, and the test segments of weights-only); 0 when weight
	// phases are not cut by length.
	PhaseSteps int `json:"phase_steps"`
	// PhaseIterations is the length of a fixed harness phase.
	PhaseIterations int `json:"phase_iterations"`
	// Patience rule, weight side in steps.
	Window   int `json:"window"`
	BurnIn   int `json:"burn_in"`
	Patience int `json:"patience"`
	// Patience rule, harness side in iterations.
	HarnessMin      int `json:"harness_min"`
	HarnessPatience int `json:"harness_patience"`
	HarnessCap      int `json:"harness_cap"`

	MaxWeightSteps       int   `json:"max_weight_steps"`
	MaxHarnessIterations int   `json:"max_harness_iterations"`
	MaxRollouts          int64 `json:"max_rollouts"`

	SearchSize             int   `json:"search_size"`
	StepRollouts           int64 `json:"step_rollouts"`
	FirstIterationRollouts int64 `json:"first_iteration_rollouts"`
	IterationRollouts      int64 `json:"iteration_rollouts"`
	TestRollouts           int64 `json:"test_rollouts"`
	// HarnessReserve is what stagewise keeps of budget.rollouts for its
	// harness stage while it trains.
	HarnessReserve int64 `json:"harness_reserve"`

	Tests          bool `json:"tests"`
	TestEveryPhase bool `json:"test_every_phase"`
}

// ErrInputs is matched by every error New returns.
var ErrInputs = errors.New("schedule inputs")

// Planner decides the next unit of a run. It holds no state between
// calls: Next is a function of the inputs given to New and the history.
type Planner struct {
	exp *spec.Experiment
	p   Params
}

// New derives the planner's parameters and checks that the rules can run
// on them: a phase that nothing would ever end is an error here, not a run
// that never stops.
func New(in Inputs) (*Planner, error) {
	if in.Experiment == nil {
		return nil, fmt.Errorf("%w: no experiment", ErrInputs)
	}
	e := in.Experiment.Clone()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInputs}, args...)...))
	}
	p := Params{Schedule: e.Schedule, Mode: e.Switch.Mode}
	sc, ok := schedules.Get(e.Schedule)
	if !ok {
		bad("schedule %q is not one of %v", e.Schedule, schedules.Names())
	}
	alternating := sc.Alternates
	if alternating && e.Switch.Mode != spec.SwitchFixed && e.Switch.Mode != spec.SwitchPatience {
		bad("switch.mode %q is not fixed or patience", e.Switch.Mode)
	}
	b := e.Budget
	if b.WeightSteps < 0 || b.HarnessIterations < 0 || b.Rollouts < 0 || !(b.Epochs >= 0) || math.IsInf(b.Epochs, 0) {
		bad("budget values must be >= 0 (weight_steps %d, epochs %v, rollouts %d, harness_iterations %d)",
			b.WeightSteps, b.Epochs, b.Rollouts, b.HarnessIterations)
	}
	p.MaxRollouts = b.Rollouts
	p.MaxHarnessIterations = b.HarnessIterations

	if e.HasWeightPhases() {
		if in.TrainSize < 1 {
			bad("the training split is empty (train size %d)", in.TrainSize)
		}
		if e.RSFT.BatchSize < 1 || e.RSFT.GroupSize < 1 {
			bad("rsft.batch_size %d and rsft.group_size %d must be >= 1", e.RSFT.BatchSize, e.RSFT.GroupSize)
		}
		p.StepsPerEpoch = StepsPerEpoch(in.TrainSize, e.RSFT.BatchSize)
		p.StepRollouts = WeightStepRollouts(e)
		if b.WeightSteps > 0 {
			p.MaxWeightSteps = b.WeightSteps
		}
		if b.Epochs > 0 && p.StepsPerEpoch > 0 {
			n := EpochsToSteps(b.Epochs, p.StepsPerEpoch)
			if p.MaxWeightSteps == 0 || n < p.MaxWeightSteps {
				p.MaxWeightSteps = n
			}
		}
		if p.MaxWeightSteps == 0 && p.MaxRollouts == 0 {
			bad("schedule %s: set budget.weight_steps, budget.epochs or budget.rollouts, or weight training never ends", e.Schedule)
		}
	}
	if e.HasHarnessPhases() {
		h := e.Harness
		if h.CandidatesPerIteration < 1 || h.SearchSetSize < 1 || h.SamplesPerCandidate < 1 {
			bad("harness.candidates_per_iteration %d, search_set_size %d and samples_per_candidate %d must be >= 1",
				h.CandidatesPerIteration, h.SearchSetSize, h.SamplesPerCandidate)
		}
		if in.SearchSize < 0 {
			bad("search set size %d is negative", in.SearchSize)
		}
		p.SearchSize = h.SearchSetSize
		if in.SearchSize > 0 && in.SearchSize < p.SearchSize {
			p.SearchSize = in.SearchSize
		}
		p.FirstIterationRollouts = HarnessIterationRollouts(e, p.SearchSize, 1)
		p.IterationRollouts = HarnessIterationRollouts(e, p.SearchSize, 2)
		if !alternating && p.MaxHarnessIterations == 0 && p.MaxRollouts == 0 {
			bad("schedule %s: set budget.harness_iterations or budget.rollouts, or harness search never ends", e.Schedule)
		}
	}
	if sc.Weights && sc.Harness && !alternating {
		// Stagewise. Without a harness-iteration budget the harness stage
		// is bounded by rollouts alone; keeping at least its first
		// iteration is what makes it a stage at all.
		p.HarnessReserve = p.FirstIterationRollouts
		if p.MaxHarnessIterations > 0 {
			p.HarnessReserve = HarnessPhaseRollouts(e, p.SearchSize, p.MaxHarnessIterations)
		}
	}
	if alternating {
		switch e.Switch.Mode {
		case spec.SwitchFixed:
			f := e.Switch.Fixed
			if !(f.Epochs > 0) || math.IsInf(f.Epochs, 0) || f.Iterations < 1 {
				bad("switch.fixed.epochs %v must be > 0 and switch.fixed.iterations %d >= 1", f.Epochs, f.Iterations)
			} else {
				p.PhaseSteps = EpochsToSteps(f.Epochs, p.StepsPerEpoch)
				p.PhaseIterations = f.Iterations
			}
		case spec.SwitchPatience:
			s := e.Switch.Patience
			if !(s.Window > 0) || !(s.BurnIn >= 0) || !(s.Patience > 0) || math.IsInf(s.Window+s.BurnIn+s.Patience, 0) {
				bad("switch.patience window %v, burn_in %v, patience %v must be finite, window and patience > 0, burn_in >= 0",
					s.Window, s.BurnIn, s.Patience)
			}
			if s.HarnessMin < 1 || s.HarnessPatience < 1 || s.HarnessCap < s.HarnessMin {
				bad("switch.patience harness_min %d and harness_patience %d must be >= 1 and harness_cap %d >= harness_min",
					s.HarnessMin, s.HarnessPatience, s.HarnessCap)
			}
			p.Window = EpochsToSteps(s.Window, p.StepsPerEpoch)
			p.BurnIn = EpochsToSteps(s.BurnIn, p.StepsPerEpoch)
			p.Patience = EpochsToSteps(s.Patience, p.StepsPerEpoch)
			p.HarnessMin, p.HarnessPatience, p.HarnessCap = s.HarnessMin, s.HarnessPatience, s.HarnessCap
		}
	}
	if sc.Weights && !sc.Harness && e.Switch.Fixed.Epochs > 0 && !math.IsInf(e.Switch.Fixed.Epochs, 0) {
		// Weights-only has nothing to switch to; its weight steps are cut
		// into phases of whale's fixed length only so that the baseline is
		// tested at the same points of training as whale.
		p.PhaseSteps = EpochsToSteps(e.Switch.Fixed.Epochs, p.StepsPerEpoch)
	}
	if in.TestSize < 0 {
		bad("test size %d is negative", in.TestSize)
	}
	if e.Eval.K < 1 {
		bad("eval.k %d must be >= 1", e.Eval.K)
	}
	p.Tests = in.TestSize > 0
	p.TestEveryPhase = e.Eval.TestEveryPhase
	if p.TestEveryPhase && !p.Tests {
		bad("eval.test_every_phase is set but the test split is empty")
	}
	p.TestRollouts = TestRollouts(in.TestSize, e.Eval.K)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Planner{exp: e, p: p}, nil
}

// Params returns the derived parameters.
func (pl *Planner) Params() Params { return pl.p }

// Next is New(in) followed by Planner.Next(h).
func Next(in Inputs, h History) (Decision, error) {
	pl, err := New(in)
	if err != nil {
		return Decision{}, err
	}
	return pl.Next(h)
}

// Next replays h and decides what runs after it. Every unit of h must be
// the unit the planner would have chosen at its place (kind, phase, index);
// a history that strays from the plan is a *HistoryError, since deciding
// on top of it would only compound the damage.
func (pl *Planner) Next(h History) (Decision, error) {
	s := newState(pl)
	for i, u := range h {
		s.quiet = true
		want := s.decide()
		if err := checkUnit(u); err != nil {
			return Decision{}, &HistoryError{At: i, Got: u, Want: want, Problem: err.Error()}
		}
		if u.Kind != want.Kind || u.Phase != want.Phase || u.Index != want.Index {
			// Decide again with reasons, for the error message.
			s.quiet = false
			return Decision{}, &HistoryError{At: i, Got: u, Want: s.decide()}
		}
		s.apply(u)
	}
	s.quiet = false
	return s.decide(), nil
}

// ErrHistory is matched by every *HistoryError.
var ErrHistory = errors.New("history does not follow the plan")

// HistoryError says which unit of a history the planner disagrees with.
type HistoryError struct {
	At      int
	Got     Unit
	Want    Decision
	Problem string // set when the unit itself is malformed
}

func (e *HistoryError) Error() string {
	if e.Problem != "" {
		return fmt.Sprintf("history[%d] (%s phase %d index %d): %s", e.At, e.Got.Kind, e.Got.Phase, e.Got.Index, e.Problem)
	}
	want := string(e.Want.Kind)
	if e.Want.Position != "" {
		want += " " + e.Want.Position
	}
	return fmt.Sprintf("history[%d] is %s phase %d index %d, but the plan says %s (phase %d index %d): %s",
		e.At, e.Got.Kind, e.Got.Phase, e.Got.Index, want, e.Want.Phase, e.Want.Index, e.Want.Reason)
}

func (e *HistoryError) Is(target error) bool { return target == ErrHistory }

func checkUnit(u Unit) error {
	if u.Rollouts < 0 {
		return fmt.Errorf("rollouts %d is negative", u.Rollouts)
	}
	finite := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s is %v", name, v)
		}
		return nil
	}
	if err := finite("mean_reward", u.MeanReward); err != nil {
		return err
	}
	if err := finite("best_score", u.BestScore); err != nil {
		return err
	}
	for i, v := range u.Scores {
		if err := finite(fmt.Sprintf("scores[%d]", i), v); err != nil {
			return err
		}
	}
	return nil
}
