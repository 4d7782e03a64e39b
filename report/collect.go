package report

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/buildinfo"
	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/metrics"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/stages/filter"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/storage"
)

// Data is everything the page shows; report.json holds it as JSON.
type Data struct {
	Generated time.Time `json:"generated"`
	// Root is the bucket URL with credentials redacted.
	Root string `json:"root"`
	// WhaleVersion is the version of the whale that wrote the report.
	WhaleVersion string `json:"whale_version"`
	Runs         []*Run `json:"runs"`
	// Comparison sets schedules side by side over seeds (Compare); nil
	// when the report was not asked to group runs.
	Comparison *Comparison `json:"comparison,omitempty"`
}

// Run is one run as its committed artifacts show it.
type Run struct {
	Name string `json:"name"`
	// Label names the run in plots: "<run> (<schedule>[, <switch>])".
	Label       string    `json:"label"`
	Description string    `json:"description,omitempty"`
	Domain      string    `json:"domain"`
	Schedule    string    `json:"schedule"`
	Switch      string    `json:"switch,omitempty"` // only for schedules that alternate
	SpecDigest  string    `json:"spec_digest"`
	Created     time.Time `json:"created"`
	// CreatedBy is the whale version that froze run.json.
	CreatedBy string `json:"created_by"`
	// K is the test evaluation's k (mean@k, pass@k).
	K      int    `json:"k"`
	Budget Budget `json:"budget"`
	// Seed is the spec's seed.
	Seed int64 `json:"seed"`

	// State is StateDone, StateInProgress or StateUnknown; StateNote says
	// why the run ended, or what it does next.
	State     string `json:"state"`
	StateNote string `json:"state_note"`

	// Rollouts are the target-model rollouts spent on weight steps and
	// harness iterations (what budget.rollouts bounds); TestRollouts those
	// of the test evaluations, counted apart.
	Rollouts          int64 `json:"rollouts"`
	TestRollouts      int64 `json:"test_rollouts"`
	WeightSteps       int   `json:"weight_steps"`       // done
	HarnessIterations int   `json:"harness_iterations"` // done
	// Final is the newest test; nil when the run has none.
	Final *TestPoint `json:"final,omitempty"`
	// Peak is the test with the best mean@k, the first to reach it on a
	// tie: the paper reports the best mean@8 over a run's tests. Nil when
	// the run has no test.
	Peak *TestPoint `json:"peak,omitempty"`

	// Started and Finished span the run's committed stages; WallSeconds is
	// the time between them, StageSeconds the sum of the stages' own times.
	Started      *time.Time `json:"started,omitempty"`
	Finished     *time.Time `json:"finished,omitempty"`
	WallSeconds  float64    `json:"wall_seconds"`
	StageSeconds float64    `json:"stage_seconds"`

	Units      []Unit      `json:"units"`
	Phases     []Phase     `json:"phases"`
	Tests      []TestPoint `json:"tests"`
	Candidates []Candidate `json:"candidates"`
	// Ignored are committed stage folders at positions outside the
	// schedule (stages run by hand under free-form names).
	Ignored []string `json:"ignored,omitempty"`
}

// Run states.
const (
	StateDone       = "done"
	StateInProgress = "in progress"
	StateUnknown    = "unknown" // the planner could not read the run
)

// Budget is the run's spec.budget.
type Budget struct {
	Rollouts          int64   `json:"rollouts,omitempty"`
	WeightSteps       int     `json:"weight_steps,omitempty"`
	Epochs            float64 `json:"epochs,omitempty"`
	HarnessIterations int     `json:"harness_iterations,omitempty"`
}

// Unit kinds, as schedule.Kind spells them.
const (
	KindWeight  = string(schedule.KindWeight)
	KindHarness = string(schedule.KindHarness)
	KindTest    = string(schedule.KindTest)
)

// Unit is one position of the run: a weight step, a harness iteration or
// a test. Fields that do not apply to its kind are absent.
type Unit struct {
	Position string `json:"position"`
	Kind     string `json:"kind"`
	Round    int    `json:"round"`
	// Index is the step or iteration within its phase (0 for tests).
	Index int `json:"index"`
	// Phase numbers the run's phases from 0; a test has the phase it follows.
	Phase int `json:"phase"`
	// Done: the unit's last stage is committed.
	Done   bool     `json:"done"`
	Stages []string `json:"stages"`
	// Rollouts is the unit's own episodes; RolloutsBefore and
	// RolloutsAfter the run's budgeted rollouts before and after it
	// (equal for a test, which the budget does not count).
	Rollouts       int64      `json:"rollouts"`
	RolloutsBefore int64      `json:"rollouts_before"`
	RolloutsAfter  int64      `json:"rollouts_after"`
	Seconds        float64    `json:"seconds"`
	Finished       *time.Time `json:"finished,omitempty"`

	// Step counts weight steps across the run from 1.
	Step int `json:"step,omitempty"`
	// MeanReward is the weight step's mean training reward.
	MeanReward *float64 `json:"mean_reward,omitempty"`
	// AcceptanceRate is the filter's accepted / episodes.
	AcceptanceRate *float64 `json:"acceptance_rate,omitempty"`
	Accepted       *int64   `json:"accepted,omitempty"`
	Trained        *bool    `json:"trained,omitempty"`
	TrainLoss      *float64 `json:"train_loss,omitempty"` // mean loss of the last epoch

	// Model is the model the unit made (a weight step's finetune) or
	// used (an evaluation).
	Model string `json:"model,omitempty"`
	// HarnessID and Harness name the harness a weight step rolled out
	// with, a harness iteration's best candidate, or the harness a test
	// scored.
	HarnessID string `json:"harness_id,omitempty"`
	Harness   string `json:"harness,omitempty"`
	// Candidates is how many candidates a harness iteration scored;
	// BestScore the best search-set success among them.
	Candidates int      `json:"candidates,omitempty"`
	BestScore  *float64 `json:"best_score,omitempty"`
	// MeanAtK and PassAtK are a test's scores with k samples per task.
	MeanAtK *float64 `json:"mean_at_k,omitempty"`
	PassAtK *float64 `json:"pass_at_k,omitempty"`
	K       int      `json:"k,omitempty"`
	// Note is one line on anything unusual (training skipped, no valid
	// candidate).
	Note string `json:"note,omitempty"`
}

// Phase is a run of consecutive weight steps or harness iterations.
type Phase struct {
	Kind   string `json:"kind"` // KindWeight or KindHarness
	Number int    `json:"number"`
	Round  int    `json:"round"`
	Units  int    `json:"units"`
	First  string `json:"first"`
	Last   string `json:"last"`
	// Start and End are the budgeted rollouts before its first unit and
	// after its last.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	Done  bool  `json:"done"`
	// Winner is a harness phase's winner over its whole archive (success,
	// then fewer turns, then archive order), as the planner picks it.
	Winner   string `json:"winner,omitempty"`
	WinnerID string `json:"winner_id,omitempty"`
}

// TestPoint is one test evaluation on the accuracy curve.
type TestPoint struct {
	Position string `json:"position"`
	// Round is the position's round; Section says which test it is: the
	// initial one ("initial"), after a weight phase ("weight") or after a
	// harness phase ("harness"). The stage is always evaluate.
	Round   int    `json:"round"`
	Section string `json:"section"`
	// Rollouts is the budgeted rollouts spent before the test.
	Rollouts int64   `json:"rollouts"`
	MeanAtK  float64 `json:"mean_at_k"`
	PassAtK  float64 `json:"pass_at_k"`
	K        int     `json:"k"`
	Harness  string  `json:"harness"`
	Model    string  `json:"model"`
}

// Candidate is one harness candidate scored on the search set.
type Candidate struct {
	Position  string  `json:"position"`
	Phase     int     `json:"phase"`
	Round     int     `json:"round"`
	HarnessID string  `json:"harness_id"`
	Name      string  `json:"name"`
	Tasks     int     `json:"tasks"` // 0: nothing was scored (never on the frontier)
	Success   float64 `json:"success"`
	MeanTurns float64 `json:"mean_turns"`
	// OnFrontier: on the Pareto frontier (success ↑, mean turns ↓) of its
	// harness phase's archive; Winner: the phase's winner.
	OnFrontier bool `json:"on_frontier"`
	Winner     bool `json:"winner"`
}

// Collect reads the runs' frozen specs and committed stages, and asks the
// planner whether each run is done. A run that has no run.json is an
// error; a run with no committed stage is reported empty.
func Collect(ctx context.Context, s *storage.Store, runs []string) (*Data, error) {
	if len(runs) == 0 {
		return nil, errors.New("report: no run given")
	}
	d := &Data{Generated: time.Now().UTC().Truncate(time.Second), Root: redact.URL(s.URL()), WhaleVersion: buildinfo.Version()}
	seen := map[string]bool{}
	for _, name := range runs {
		if seen[name] {
			continue
		}
		seen[name] = true
		if err := storage.CheckRun(name); err != nil {
			return nil, err
		}
		r, err := collectRun(ctx, s, name)
		if err != nil {
			return nil, err
		}
		d.Runs = append(d.Runs, r)
	}
	return d, nil
}

func collectRun(ctx context.Context, s *storage.Store, name string) (*Run, error) {
	frozen, err := pipeline.LoadRun(ctx, s, name)
	if err != nil {
		return nil, err
	}
	pl := &pipeline.Planner{Store: s, Run: name, Spec: &frozen.Spec}
	sv, err := pl.Survey(ctx)
	if err != nil {
		return nil, err
	}
	r, err := build(name, frozen, sv.Units)
	if err != nil {
		return nil, err
	}
	r.Ignored = sv.Ignored
	r.State, r.StateNote = state(ctx, pl, sv)
	return r, nil
}

// state says whether the run is done, or what it does next and who is
// running it.
func state(ctx context.Context, pl *pipeline.Planner, sv *pipeline.Survey) (string, string) {
	if sv.PlanErr != nil {
		return StateUnknown, sv.PlanErr.Error()
	}
	p := sv.Plan
	if p.Done() {
		return StateDone, strings.TrimPrefix(p.Decision.Reason, "done: ")
	}
	note := fmt.Sprintf("next: %s at %s", p.Stage, p.Decision.Position)
	if rec, held, err := pl.LeaseHolder(ctx); err == nil && held {
		note += fmt.Sprintf(" (running: held by %s on %s)", rec.Holder, rec.Host)
	}
	return StateInProgress, note
}

// build derives the report of one run from its spec and units; it reads
// nothing, so the tests drive it with hand-made manifests.
func build(name string, frozen *spec.Run, units []pipeline.Unit) (*Run, error) {
	e := &frozen.Spec
	r := &Run{
		Name: name, Description: e.Description, Domain: e.Domain, Schedule: e.Schedule,
		SpecDigest: frozen.SpecDigest, Created: frozen.Created, CreatedBy: frozen.WhaleVersion, K: e.Eval.K, Seed: e.Seed,
		Budget: Budget{Rollouts: e.Budget.Rollouts, WeightSteps: e.Budget.WeightSteps, Epochs: e.Budget.Epochs,
			HarnessIterations: e.Budget.HarnessIterations},
		Units: []Unit{}, Phases: []Phase{}, Tests: []TestPoint{}, Candidates: []Candidate{},
	}
	if e.Alternates() {
		r.Switch = e.Switch.Mode
		if e.Switch.Mode == spec.SwitchFixed {
			r.Switch = fmt.Sprintf("fixed E=%g I=%d", e.Switch.Fixed.Epochs, e.Switch.Fixed.Iterations)
		}
	}
	r.Label = name + " (" + e.Schedule
	if r.Switch != "" {
		r.Label += ", " + r.Switch
	}
	r.Label += ")"

	evals, err := decodeEvals(units)
	if err != nil {
		return nil, err
	}
	names := harnessNames(evals)
	var spent int64
	var first, last time.Time
	for i := range units {
		u := &units[i]
		ru := Unit{Position: u.Pos.String(), Kind: string(u.Kind), Round: u.Pos.Round, Index: u.Pos.Index,
			Phase: u.Phase, Done: u.Done, Rollouts: u.Rollouts, RolloutsBefore: spent}
		if u.Budgeted() {
			spent += u.Rollouts
		} else {
			r.TestRollouts += u.Rollouts
		}
		ru.RolloutsAfter = spent
		var end time.Time
		for _, st := range stageOrder(u) {
			m := u.Stages[st]
			ru.Stages = append(ru.Stages, st)
			ru.Seconds += max(m.Finished.Sub(m.Started).Seconds(), 0)
			if first.IsZero() || m.Started.Before(first) {
				first = m.Started
			}
			end = later(end, m.Finished)
		}
		if !end.IsZero() {
			ru.Finished = &end
			last = later(last, end)
		}
		r.StageSeconds += ru.Seconds
		if err := fill(&ru, u, evals[i], names); err != nil {
			return nil, err
		}
		switch u.Kind {
		case schedule.KindWeight:
			ru.Step = r.WeightSteps + 1
			if u.Done {
				r.WeightSteps++
			}
		case schedule.KindHarness:
			if u.Done {
				r.HarnessIterations++
			}
		case schedule.KindTest:
			if ru.MeanAtK != nil {
				r.Tests = append(r.Tests, TestPoint{Position: ru.Position, Round: ru.Round, Section: testSection(u.Pos.Section),
					Rollouts: ru.RolloutsBefore, MeanAtK: *ru.MeanAtK, PassAtK: *ru.PassAtK, K: ru.K, Harness: ru.Harness, Model: ru.Model})
			}
		}
		r.Units = append(r.Units, ru)
	}
	r.Rollouts = spent
	if n := len(r.Tests); n > 0 {
		r.Final = &r.Tests[n-1]
		r.Peak = peak(r.Tests)
	}
	if !first.IsZero() {
		r.Started, r.Finished = &first, &last
		r.WallSeconds = last.Sub(first).Seconds()
	}
	r.Phases, r.Candidates = phases(r.Units, evals, names)
	return r, nil
}

// peak is the test with the best mean@k, the first to reach it. (Scores
// come from JSON summaries, so none is NaN.)
func peak(tests []TestPoint) *TestPoint {
	best := 0
	for i, t := range tests {
		if t.MeanAtK > tests[best].MeanAtK {
			best = i
		}
	}
	return &tests[best]
}

// Test sections as TestPoint names them.
const (
	TestInitial = "initial"
	TestWeight  = "weight"
	TestHarness = "harness"
)

func testSection(s schedule.Section) string {
	switch s {
	case schedule.SectionWeightTest:
		return TestWeight
	case schedule.SectionHarnessTest:
		return TestHarness
	}
	return TestInitial
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stageOrder lists a unit's committed stages in the order they run.
func stageOrder(u *pipeline.Unit) []string {
	var out []string
	for _, st := range []string{pipeline.StageRollout, pipeline.StageFilter, pipeline.StageFinetune, pipeline.StagePropose, pipeline.StageEvaluate} {
		if u.Stages[st] != nil {
			out = append(out, st)
		}
	}
	return out
}

// decodeEvals decodes each unit's evaluate summary once, for the names,
// the units and the phases; nil where a unit has no evaluation.
func decodeEvals(units []pipeline.Unit) ([]*evaluate.Frontier, error) {
	out := make([]*evaluate.Frontier, len(units))
	for i := range units {
		m := units[i].Stages[pipeline.StageEvaluate]
		if m == nil {
			continue
		}
		f, err := evaluate.DecodeSummary(m.Summary)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Dir, err)
		}
		out[i] = f
	}
	return out, nil
}

// harnessNames maps harness ids to the names the search evaluations gave
// them: a test or a rollout knows its harness only by id.
func harnessNames(evals []*evaluate.Frontier) map[string]string {
	names := map[string]string{}
	for _, f := range evals {
		if f == nil {
			continue
		}
		for _, c := range f.Candidates {
			if c.Name != "" && !strings.HasPrefix(c.Name, "sha256:") {
				names[c.HarnessID] = c.Name
			}
		}
	}
	return names
}

// harnessName is a harness's name, or its short id when no evaluation
// named it.
func harnessName(names map[string]string, id, given string) string {
	if n, ok := names[id]; ok {
		return n
	}
	if given != "" {
		return given
	}
	return shortID(id)
}

func shortID(id string) string {
	if len(id) > len("sha256:")+12 {
		return id[:len("sha256:")+12]
	}
	return id
}

// fill sets the kind-specific fields of ru from u's summaries; f is u's
// decoded evaluation, if any.
func fill(ru *Unit, u *pipeline.Unit, f *evaluate.Frontier, names map[string]string) error {
	switch u.Kind {
	case schedule.KindWeight:
		if m := u.Stages[pipeline.StageRollout]; m != nil {
			ru.MeanReward = ptr(num(m.Summary, "mean_reward"))
			if id, _ := m.Summary["harness_id"].(string); id != "" {
				ru.HarnessID, ru.Harness = id, harnessName(names, id, "")
			}
		}
		if m := u.Stages[pipeline.StageFilter]; m != nil {
			f, err := filter.ParseSummary(m.Summary)
			if err != nil {
				return fmt.Errorf("%s: %w", m.Dir, err)
			}
			ru.AcceptanceRate, ru.Accepted = ptr(f.AcceptanceRate), ptr(f.Accepted)
			ru.MeanReward = ptr(f.MeanReward)
		}
		if m := u.Stages[pipeline.StageFinetune]; m != nil {
			ru.Model, _ = m.Summary[finetune.SumModelID].(string)
			if t, ok := m.Summary[finetune.SumTrained].(bool); ok {
				ru.Trained = &t
			}
			if _, ok := m.Summary[finetune.SumLocalLossLast]; ok {
				ru.TrainLoss = ptr(num(m.Summary, finetune.SumLocalLossLast))
			}
			if msg, _ := m.Summary[finetune.SumTrainerError].(string); msg != "" {
				ru.Note = "training failed, step kept untrained: " + firstLine(msg)
			} else if ru.Trained != nil && !*ru.Trained {
				ru.Note = "nothing accepted: the model is unchanged"
			}
		}
	case schedule.KindHarness, schedule.KindTest:
		if f == nil {
			if p := u.Stages[pipeline.StagePropose]; p != nil {
				ru.Note = fmt.Sprintf("proposed %d valid candidate(s); not evaluated yet", int(num(p.Summary, "valid")))
			}
			return nil
		}
		ru.Model = f.ModelName
		if u.Kind == schedule.KindTest {
			if len(f.Candidates) == 0 || f.Candidates[0].Tasks == 0 {
				ru.Note = "nothing was scored"
				return nil
			}
			c := f.Candidates[0]
			ru.HarnessID, ru.Harness = c.HarnessID, harnessName(names, c.HarnessID, c.Name)
			ru.MeanAtK, ru.PassAtK, ru.K = ptr(c.Success), ptr(c.PassAtK), f.K
			return nil
		}
		for _, c := range f.Candidates {
			if c.Tasks > 0 {
				ru.Candidates++
			}
		}
		if f.Winner != "" {
			ru.HarnessID, ru.Harness, ru.BestScore = f.Winner, harnessName(names, f.Winner, f.WinnerName), ptr(f.BestScore)
		}
		if ru.Candidates == 0 {
			ru.Note = "no candidate was scored"
			if p := u.Stages[pipeline.StagePropose]; p != nil && num(p.Summary, "valid") == 0 {
				ru.Note = fmt.Sprintf("the proposer gave no valid candidate (%d rejected)", int(num(p.Summary, "rejected")))
			}
		}
	}
	return nil
}

// phases groups the weight steps and harness iterations into phases and
// lists every scored search candidate with its phase's frontier and
// winner, computed over the phase's whole archive as the planner does.
func phases(rus []Unit, evals []*evaluate.Frontier, names map[string]string) ([]Phase, []Candidate) {
	out := []Phase{}
	cands := []Candidate{}
	var archive []metrics.Point // the current harness phase's, in order
	var phaseCands []int        // indexes into cands
	closeHarness := func() {
		if len(out) == 0 || out[len(out)-1].Kind != KindHarness {
			return
		}
		ph := &out[len(out)-1]
		on := map[int]bool{}
		byID := map[string][]int{}
		for n, i := range phaseCands {
			byID[archive[n].ID] = append(byID[archive[n].ID], i)
		}
		for _, p := range metrics.Frontier(archive) {
			for _, i := range byID[p.ID] {
				if cands[i].Success == p.Success && cands[i].MeanTurns == p.Turns {
					on[i] = true
				}
			}
		}
		for _, i := range phaseCands {
			cands[i].OnFrontier = on[i]
		}
		if _, wi, ok := metrics.Winner(archive); ok {
			c := &cands[phaseCands[wi]]
			c.Winner = true
			ph.Winner, ph.WinnerID = c.Name, c.HarnessID
		}
		archive, phaseCands = nil, nil
	}
	for i, ru := range rus {
		if ru.Kind == KindTest {
			continue
		}
		if len(out) == 0 || out[len(out)-1].Number != ru.Phase {
			closeHarness()
			out = append(out, Phase{Kind: ru.Kind, Number: ru.Phase, Round: ru.Round, First: ru.Position, Start: ru.RolloutsBefore, Done: true})
		}
		ph := &out[len(out)-1]
		ph.Units++
		ph.Last, ph.End = ru.Position, ru.RolloutsAfter
		ph.Done = ph.Done && ru.Done
		if ru.Kind != KindHarness {
			continue
		}
		f := evals[i]
		if f == nil {
			continue
		}
		for _, c := range f.Candidates {
			p := metrics.Point{ID: c.HarnessID, Success: c.Success, Turns: c.MeanTurns}
			if c.Tasks == 0 {
				p.Success, p.Turns = math.NaN(), math.NaN()
			}
			archive = append(archive, p)
			phaseCands = append(phaseCands, len(cands))
			cands = append(cands, Candidate{Position: ru.Position, Phase: ru.Phase, Round: ru.Round, HarnessID: c.HarnessID,
				Name: harnessName(names, c.HarnessID, c.Name), Tasks: c.Tasks, Success: c.Success, MeanTurns: c.MeanTurns})
		}
	}
	closeHarness()
	return out, cands
}

func ptr[T any](v T) *T { return &v }

// num reads a number from a stage summary.
var num = storage.SummaryNumber

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 160 {
		s = s[:157] + "…"
	}
	return s
}

// colorOf is run i's colour index: i, or with a comparison the index of
// its group, so that tables and plots colour seeds of one schedule alike.
func (d *Data) colorOf(i int) int {
	if d.Comparison == nil {
		return i
	}
	for _, g := range d.Comparison.Groups {
		if slices.Contains(g.Runs, d.Runs[i].Name) {
			return g.Index
		}
	}
	return i
}
