package schedule

import (
	"fmt"
	"math"

	"github.com/whalerun/whale/pipeline/schedule/schedules"
	"github.com/whalerun/whale/pipeline/spec"
)

// improveEps is how much a window mean or a search score must exceed the
// best to count as progress: rounding of sums of equal rewards in another
// order must not reset patience, and no real difference (one rollout in a
// batch is 1/2048) is that small.
const improveEps = 1e-9

// dryIterations is how many harness iterations in a row may score nothing
// (the proposer returned no valid candidate) before the phase ends: a
// proposer that has run dry would otherwise spin through free, empty
// iterations forever when only budget.rollouts bounds the phase. An LLM
// proposer may come back empty once by chance; three times is a pattern.
const dryIterations = 3

// state is the planner's view after replaying a prefix of the history.
type state struct {
	pl *Planner
	p  Params
	// quiet skips reasons and signals while a history is replayed: only
	// the last decision is shown, and building the others made replay
	// allocation-bound.
	quiet bool
	sig   map[string]float64 // the signals of the decision being made

	phase       int  // current phase, -1 before the first
	n           int  // units done in the current phase
	testedPhase int  // phase whose test has run; -2 for none, -1 initial pair
	anyTest     bool // a test unit has run

	weightSteps  int
	harnessIters int
	spent        int64 // training + harness-search rollouts
	testSpent    int64

	// current weight phase
	rewards  []float64
	winMean  float64
	bestMean float64
	bestStep int

	// current harness phase
	bestScore float64
	bestIter  int
	perfect   bool
	dry       int // consecutive iterations that scored no candidate
}

func newState(pl *Planner) *state {
	return &state{pl: pl, p: pl.p, phase: -1, testedPhase: -2}
}

// sched is the row of the run's schedule (Plan has checked it exists).
func (s *state) sched() schedules.Schedule {
	sc, _ := schedules.Get(s.p.Schedule)
	return sc
}

func (s *state) alternating() bool { return s.sched().Alternates }

// phaseKind is the kind of phase ph, or false when the schedule has no such
// phase.
func (s *state) phaseKind(ph int) (Kind, bool) {
	sc := s.sched()
	switch {
	case sc.Alternates:
		if ph%2 == 0 {
			return KindWeight, true
		}
		return KindHarness, true
	case sc.Weights && sc.Harness: // one weight phase, then one harness phase
		switch ph {
		case 0:
			return KindWeight, true
		case 1:
			return KindHarness, true
		}
	case sc.Weights: // weight phases until a budget ends
		return KindWeight, true
	case sc.Harness:
		return KindHarness, ph == 0
	}
	return "", false
}

// round is the 1-based round of phase ph: a round is one weight phase and
// the harness phase after it.
func (s *state) round(ph int) int {
	if ph < 0 {
		return 0
	}
	switch sc := s.sched(); {
	case sc.Alternates:
		return ph/2 + 1
	case !sc.Harness:
		return ph + 1
	}
	return 1
}

func (s *state) apply(u Unit) {
	switch u.Kind {
	case KindTest:
		s.testedPhase = u.Phase
		s.anyTest = true
		s.testSpent += u.Rollouts
		return
	case KindWeight:
		s.weightSteps++
	case KindHarness:
		s.harnessIters++
	}
	s.spent += u.Rollouts
	if u.Phase != s.phase {
		s.phase, s.n = u.Phase, 0
		s.rewards = s.rewards[:0]
		s.bestMean, s.bestStep = math.Inf(-1), 0
		s.bestScore, s.bestIter, s.perfect, s.dry = math.Inf(-1), 0, false, 0
	}
	s.n++
	switch u.Kind {
	case KindWeight:
		s.rewards = append(s.rewards, u.MeanReward)
		w := max(1, s.p.Window)
		win := s.rewards[max(0, len(s.rewards)-w):]
		var sum float64
		for _, r := range win {
			sum += r
		}
		// The window is partial for the first steps of a phase; burn-in is
		// what keeps those early means from ending it.
		s.winMean = sum / float64(len(win))
		if s.bestStep == 0 || s.winMean > s.bestMean+improveEps {
			s.bestMean, s.bestStep = s.winMean, s.n
		}
	case KindHarness:
		if u.Index > 1 && u.Rollouts == 0 && len(u.Scores) == 0 {
			s.dry++
		} else {
			s.dry = 0
		}
		best := u.BestScore
		for _, v := range u.Scores {
			best = max(best, v)
		}
		if s.bestIter == 0 || best > s.bestScore+improveEps {
			s.bestScore, s.bestIter = best, s.n
		}
		if u.Perfect || best >= 1 {
			s.perfect = true
		}
	}
}

// decide is the next unit after the replayed prefix.
func (s *state) decide() Decision {
	s.budgetSignals()
	var ended string // why the current phase ended, when it has
	// A phase is under way, or only the initial pair has been tested.
	if s.phase >= 0 || s.testedPhase == s.phase {
		if s.testedPhase == s.phase {
			// A test changes nothing the rules read, so asking them again
			// gives why the phase ended, and its numbers for `whale plan`.
			if s.phase >= 0 {
				kind, _ := s.phaseKind(s.phase)
				_, ended = s.continuePhase(kind)
			}
		} else {
			kind, _ := s.phaseKind(s.phase)
			cont, why := s.continuePhase(kind)
			if cont {
				return s.unit(kind, s.phase, s.n+1, why)
			}
			ended = why
			if s.p.TestEveryPhase {
				return s.test(s.phase, s.why("end of %s: %s; test its outgoing pair", s.phaseName(s.phase), why))
			}
		}
	}
	next := s.phase + 1
	if kind, ok := s.phaseKind(next); ok {
		start, why := s.canStart(kind)
		if start {
			reason := s.why("start %s", s.phaseName(next))
			if ended != "" {
				reason = s.why("%s after %s: %s", reason, s.phaseName(s.phase), ended)
			}
			return s.unit(kind, next, 1, reason)
		}
		ended = joinReason(ended, why)
	} else {
		ended = joinReason(ended, s.lastPhaseReason())
	}
	// The run is over; its final pair is tested once before done.
	if s.p.Tests && s.testedPhase != s.phase {
		return s.test(s.phase, s.why("run ends (%s); test the final pair", ended))
	}
	return Decision{
		Kind: KindDone, Phase: s.phase, Round: s.round(s.phase),
		Reason: "done: " + ended, Signals: s.sig,
	}
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func (s *state) lastPhaseReason() string {
	switch sc := s.sched(); {
	case !sc.Weights:
		return sc.Name + " runs one harness phase"
	case sc.Harness && !sc.Alternates:
		return sc.Name + " ends after its harness stage"
	}
	return "no further phase"
}

func (s *state) phaseName(ph int) string {
	if ph < 0 {
		return "the initial pair"
	}
	kind, _ := s.phaseKind(ph)
	return s.why("%s phase r%03d", kind, s.round(ph))
}

func (s *state) unit(kind Kind, ph, index int, reason string) Decision {
	d := Decision{Kind: kind, Phase: ph, Round: s.round(ph), Index: index, Reason: reason, Signals: s.sig}
	if s.quiet {
		return d
	}
	switch kind {
	case KindWeight:
		d.Position = Pos{Round: d.Round, Section: SectionWeight, Index: index}.String()
		d.Rollouts = s.p.StepRollouts
	case KindHarness:
		d.Position = Pos{Round: d.Round, Section: SectionHarness, Index: index}.String()
		d.Rollouts = s.iterationCost(index)
	}
	return d
}

func (s *state) test(ph int, reason string) Decision {
	d := Decision{Kind: KindTest, Phase: ph, Round: s.round(ph), Rollouts: s.p.TestRollouts, Reason: reason, Signals: s.sig}
	if s.quiet {
		return d
	}
	pos := Pos{Round: d.Round, Section: SectionInitialTest}
	if kind, ok := s.phaseKind(ph); ok && ph >= 0 {
		pos.Section = SectionWeightTest
		if kind == KindHarness {
			pos.Section = SectionHarnessTest
		}
	}
	d.Position = pos.String()
	return d
}

func (s *state) iterationCost(index int) int64 {
	if index <= 1 {
		return s.p.FirstIterationRollouts
	}
	return s.p.IterationRollouts
}

// continuePhase applies the phase's switch rule, then the budgets, to the
// unit after the n done.
func (s *state) continuePhase(kind Kind) (bool, string) {
	if kind == KindWeight {
		cont, why := s.weightRule()
		if !cont {
			return false, why
		}
		if ok, b := s.weightBudget(); !ok {
			return false, b
		}
		return true, why
	}
	cont, why := s.harnessRule()
	if !cont {
		return false, why
	}
	if ok, b := s.harnessBudget(s.n + 1); !ok {
		return false, b
	}
	return true, why
}

func (s *state) weightRule() (bool, string) {
	s.put("steps_in_phase", float64(s.n))
	switch {
	case s.alternating() && s.p.Mode == spec.SwitchPatience:
		s.put("window", float64(s.p.Window))
		s.put("burn_in", float64(s.p.BurnIn))
		s.put("patience", float64(s.p.Patience))
		s.put("window_mean", s.winMean)
		s.put("best_window_mean", s.bestMean)
		s.put("best_step", float64(s.bestStep))
		since := s.n - s.bestStep
		s.put("steps_since_best", float64(since))
		if s.n > s.p.BurnIn && since >= s.p.Patience {
			return false, s.why("patience: %d %s since best window mean %.3f (window %d, burn-in %d, patience %d)",
				since, plural(since, "step"), s.bestMean, s.p.Window, s.p.BurnIn, s.p.Patience)
		}
		if s.n <= s.p.BurnIn {
			return true, s.why("patience: step %d, burn-in %d steps (window mean %.3f)", s.n+1, s.p.BurnIn, s.winMean)
		}
		return true, s.why("patience: %d %s since best window mean %.3f at step %d (burn-in %d, patience %d)",
			since, plural(since, "step"), s.bestMean, s.bestStep, s.p.BurnIn, s.p.Patience)
	case s.p.PhaseSteps > 0:
		s.put("phase_steps", float64(s.p.PhaseSteps))
		rule := "fixed"
		if !s.alternating() {
			rule = "test segment"
		}
		if s.n >= s.p.PhaseSteps {
			return false, s.why("%s: %d of %d weight steps done", rule, s.n, s.p.PhaseSteps)
		}
		return true, s.why("%s: weight step %d of %d", rule, s.n+1, s.p.PhaseSteps)
	}
	return true, s.why("weight step %d of the %s weight stage", s.n+1, s.p.Schedule)
}

func (s *state) harnessRule() (bool, string) {
	s.put("iterations_in_phase", float64(s.n))
	s.put("best_score", s.bestScore)
	s.put("best_iteration", float64(s.bestIter))
	since := s.n - s.bestIter
	s.put("iterations_since_best", float64(since))
	if s.perfect {
		s.put("perfect", 1)
		return false, s.why("a candidate scored 1.0 after %d %s", s.n, plural(s.n, "iteration"))
	}
	if s.dry >= dryIterations {
		s.put("dry_iterations", float64(s.dry))
		return false, s.why("the proposer gave no valid candidate in the last %d iterations", s.dry)
	}
	switch {
	case s.alternating() && s.p.Mode == spec.SwitchPatience:
		s.put("harness_min", float64(s.p.HarnessMin))
		s.put("harness_patience", float64(s.p.HarnessPatience))
		s.put("harness_cap", float64(s.p.HarnessCap))
		if s.n >= s.p.HarnessCap {
			return false, s.why("harness cap: %d iterations", s.p.HarnessCap)
		}
		if s.n >= s.p.HarnessMin && since >= s.p.HarnessPatience {
			return false, s.why("patience: %d %s since best score %.3f (min %d, patience %d)",
				since, plural(since, "iteration"), s.bestScore, s.p.HarnessMin, s.p.HarnessPatience)
		}
		return true, s.why("patience: iteration %d, %d since best score %.3f (min %d, patience %d, cap %d)",
			s.n+1, since, s.bestScore, s.p.HarnessMin, s.p.HarnessPatience, s.p.HarnessCap)
	case s.alternating():
		s.put("phase_iterations", float64(s.p.PhaseIterations))
		if s.n >= s.p.PhaseIterations {
			return false, s.why("fixed: %d of %d harness iterations done", s.n, s.p.PhaseIterations)
		}
		return true, s.why("fixed: harness iteration %d of %d", s.n+1, s.p.PhaseIterations)
	}
	return true, s.why("harness iteration %d, best score %.3f at iteration %d", s.n+1, s.bestScore, s.bestIter)
}

// canStart says whether a phase of kind may begin now.
func (s *state) canStart(kind Kind) (bool, string) {
	if kind == KindWeight {
		return s.weightBudget()
	}
	if s.alternating() && s.p.MaxWeightSteps > 0 && s.weightSteps >= s.p.MaxWeightSteps {
		return false, "no harness phase after the last weight phase (no weight step left)"
	}
	return s.harnessBudget(1)
}

// weightBudget says whether one more weight step fits.
func (s *state) weightBudget() (bool, string) {
	if s.p.MaxWeightSteps > 0 && s.weightSteps >= s.p.MaxWeightSteps {
		return false, s.why("weight budget: %d of %d steps done", s.weightSteps, s.p.MaxWeightSteps)
	}
	if s.p.MaxRollouts > 0 {
		need := s.p.StepRollouts + s.p.HarnessReserve
		s.put("next_unit_rollouts", float64(s.p.StepRollouts))
		if s.spent+need > s.p.MaxRollouts {
			if s.p.HarnessReserve > 0 {
				return false, s.why("budget.rollouts: %d spent + %d for a weight step + %d kept for the harness stage > %d",
					s.spent, s.p.StepRollouts, s.p.HarnessReserve, s.p.MaxRollouts)
			}
			return false, s.why("budget.rollouts: %d spent + %d for a weight step > %d", s.spent, s.p.StepRollouts, s.p.MaxRollouts)
		}
	}
	return true, ""
}

// harnessBudget says whether harness iteration index of the current or
// next phase fits. In alternating schedules it also keeps one weight step's
// rollouts, so that a harness phase is always followed by weight training.
func (s *state) harnessBudget(index int) (bool, string) {
	if s.p.MaxHarnessIterations > 0 && s.harnessIters >= s.p.MaxHarnessIterations {
		return false, s.why("budget.harness_iterations: %d of %d done", s.harnessIters, s.p.MaxHarnessIterations)
	}
	if s.p.MaxRollouts > 0 {
		cost := s.iterationCost(index)
		s.put("next_unit_rollouts", float64(cost))
		if s.alternating() {
			if s.spent+cost+s.p.StepRollouts > s.p.MaxRollouts {
				return false, s.why("budget.rollouts: %d spent + %d for harness iteration %d + %d for the weight step that must follow > %d",
					s.spent, cost, index, s.p.StepRollouts, s.p.MaxRollouts)
			}
		} else if s.spent+cost > s.p.MaxRollouts {
			return false, s.why("budget.rollouts: %d spent + %d for harness iteration %d > %d", s.spent, cost, index, s.p.MaxRollouts)
		}
	}
	return true, ""
}

// why formats a reason, or nothing while replaying.
func (s *state) why(format string, args ...any) string {
	if s.quiet {
		return ""
	}
	return fmt.Sprintf(format, args...)
}

// budgetSignals starts the signals of a decision with the run's totals.
func (s *state) budgetSignals() {
	s.sig = nil
	if s.quiet {
		return
	}
	s.sig = map[string]float64{
		"rollouts_spent":          float64(s.spent),
		"test_rollouts_spent":     float64(s.testSpent),
		"weight_steps_done":       float64(s.weightSteps),
		"harness_iterations_done": float64(s.harnessIters),
	}
	if s.p.MaxRollouts > 0 {
		s.put("rollouts_budget", float64(s.p.MaxRollouts))
	}
	if s.p.MaxWeightSteps > 0 {
		s.put("weight_steps_budget", float64(s.p.MaxWeightSteps))
	}
	if s.p.MaxHarnessIterations > 0 {
		s.put("harness_iterations_budget", float64(s.p.MaxHarnessIterations))
	}
	if s.p.StepsPerEpoch > 0 {
		s.put("steps_per_epoch", float64(s.p.StepsPerEpoch))
		s.put("epochs_done", float64(s.weightSteps)/float64(s.p.StepsPerEpoch))
	}
}

func (s *state) put(key string, v float64) {
	if s.sig != nil {
		s.sig[key] = v
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
