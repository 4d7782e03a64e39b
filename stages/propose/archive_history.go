package propose

import (
	"context"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
)

// What the archive backend reads (archive_proposer.go has its policy):
// the archived harnesses as edits of their parents, their paired score
// changes on the current model, and the failure classes of their
// search-set episodes.

// Failure classes of a search-set episode that did not end correct, as
// the archive backend reads them from rollout rows (see classifyFailure).
const (
	failFormat = "format" // parse_action rejected the replies (finish "format")
	failTool   = "tool"   // a tool call failed or an action was illegal
	failWrong  = "wrong"  // an answer the verifier marked wrong
	failTurns  = "turns"  // MAX_TURNS or should_stop ended it without an answer
	failError  = "error"  // a model, hook or environment error: counted, never targeted
)

// failureClasses are the classes an edit can target, in the order that
// breaks ties between equally frequent ones.
var failureClasses = []string{failFormat, failTool, failWrong, failTurns}

// classifyFailure names the class of a failed episode from its finish
// reason and trace: a tool error anywhere in the trace makes an episode
// that ended with a wrong answer or out of turns a tool failure, since
// the answer was built on a failed call.
func classifyFailure(r schemas.Rollout) string {
	toolErr := false
	for _, e := range r.Trace {
		if e.Kind == episode.KindTool && strings.Contains(e.Feedback, "tool error") {
			toolErr = true
			break
		}
	}
	switch r.FinishReason {
	case episode.FinishFormat:
		return failFormat
	case episode.FinishIllegal:
		return failTool
	case episode.FinishError:
		return failError
	case episode.FinishMaxTurns, episode.FinishStopped:
		if toolErr {
			return failTool
		}
		return failTurns
	}
	if toolErr {
		return failTool
	}
	return failWrong
}

// atom is one constant set to one value: the unit of edit the archive
// backend learns about and recombines.
type atom struct {
	constant string
	literal  string // Starlark source of the value
	value    any    // as harness.Constants gives it
	axis     string
}

func (a atom) key() string { return a.constant + "=" + a.literal }

// label is the atom for people: "ANSWER_CUE → True".
func (a atom) label() string { return a.constant + " → " + clip(a.literal, 60) }

// record is one archived harness seen as an edit of its parent, scored
// against it on the current model.
type record struct {
	id, name string
	atoms    []atom // the constants it changed, in contract order
	opaque   bool   // it changed code besides constants: not recombinable
	// delta is the mean over the search tasks both were scored on of the
	// child's mean reward minus the parent's; se its standard error.
	delta, se float64
}

// hurtSEs is how many standard errors below its parent a record must
// score for its edit to count as hurting: a 100-episode search score
// moves by about ±0.05 between two draws of the same harness, and the
// parent, being the best so far, is likely to have drawn high, so a
// plain "scored lower" would soon ban every edit.
const hurtSEs = 2

// helped: the record scored above its parent. No margin here: a
// combination that does not help costs one slot, and being in the
// archive it is not proposed again.
func (r record) helped() bool { return r.delta > 0 }

// hurt: the record scored clearly below its parent.
func (r record) hurt() bool { return r.delta < -hurtSEs*r.se }

// effect is what the archive says about one atom on the current model,
// from the records that changed that constant alone.
type effect struct {
	atom
	records []record
}

func (e *effect) mean() float64 {
	s := 0.0
	for _, r := range e.records {
		s += r.delta
	}
	return s / float64(len(e.records))
}

// helped: every single-edit record of the atom scored above its parent.
func (e *effect) helped() bool {
	return !slices.ContainsFunc(e.records, func(r record) bool { return !r.helped() })
}

// hurt: some single-edit record of the atom scored clearly below its parent.
func (e *effect) hurt() bool { return slices.ContainsFunc(e.records, record.hurt) }

// history is what the archive backend reads besides the archive: scores
// and failure counts per harness and model id.
type history struct {
	model string // the model of the phase's newest evaluation
	// tasks: harness → model → task → mean reward (of its eval rows)
	tasks    map[string]map[string]map[string]*taskScore
	failures map[string]map[string]map[string]int // harness → model → class → failed episodes
}

type taskScore struct {
	sum float64
	n   int
}

// paired compares child with parent on the current model over the tasks
// both were scored on: the mean difference of their per-task rewards and
// its standard error (infinite below two tasks). ok is false when they
// share no task.
func (h *history) paired(child, parent string) (delta, se float64, ok bool) {
	c, p := h.tasks[child][h.model], h.tasks[parent][h.model]
	var diffs []float64
	for _, task := range slices.Sorted(maps.Keys(c)) {
		pt, ok := p[task]
		if !ok {
			continue
		}
		ct := c[task]
		diffs = append(diffs, ct.sum/float64(ct.n)-pt.sum/float64(pt.n))
	}
	n := float64(len(diffs))
	if n == 0 {
		return 0, 0, false
	}
	for _, d := range diffs {
		delta += d
	}
	delta /= n
	if n < 2 {
		return delta, math.Inf(1), true
	}
	ss := 0.0
	for _, d := range diffs {
		ss += (d - delta) * (d - delta)
	}
	return delta, math.Sqrt(ss / (n - 1) / n), true
}

// readHistory streams the evals and rollouts of every archive input.
// Rollout rows of section "test" are skipped, as for every proposer
// (readArchive has refused test-mode inputs already).
func readHistory(ctx context.Context, x *stages.Exec) (*history, error) {
	h := &history{tasks: map[string]map[string]map[string]*taskScore{}, failures: map[string]map[string]map[string]int{}}
	for _, name := range archiveInputs(x) {
		m := x.Inputs[name]
		perModel := map[string]int{}
		err := eachRow(ctx, x, m, schemas.Evals.Name, func(e schemas.Eval) error {
			byModel := h.tasks[e.HarnessID]
			if byModel == nil {
				byModel = map[string]map[string]*taskScore{}
				h.tasks[e.HarnessID] = byModel
			}
			if byModel[e.ModelID] == nil {
				byModel[e.ModelID] = map[string]*taskScore{}
			}
			t := byModel[e.ModelID][e.TaskID]
			if t == nil {
				t = &taskScore{}
				byModel[e.ModelID][e.TaskID] = t
			}
			t.sum += e.MeanReward
			t.n++
			perModel[e.ModelID]++
			return nil
		})
		if err != nil {
			return nil, err
		}
		// The newest input with evals names the model; within it, the model
		// that answered most tasks (ties to the smaller id).
		best := -1
		for _, id := range slices.Sorted(maps.Keys(perModel)) {
			if perModel[id] > best {
				h.model, best = id, perModel[id]
			}
		}
		err = eachRow(ctx, x, m, schemas.Rollouts.Name, func(r schemas.Rollout) error {
			if r.Section == sectionTest || r.Correct {
				return nil
			}
			byModel := h.failures[r.HarnessID]
			if byModel == nil {
				byModel = map[string]map[string]int{}
				h.failures[r.HarnessID] = byModel
			}
			if byModel[r.ModelID] == nil {
				byModel[r.ModelID] = map[string]int{}
			}
			byModel[r.ModelID][classifyFailure(r)]++
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

// historyRecords reads every archived harness with a source and a scored
// parent as an edit of that parent, with its score change on the current
// model, in archive order.
func historyRecords(in *input, h *history) []record {
	loaded := map[string]*harness.Harness{}
	load := func(id string) *harness.Harness {
		if hh, ok := loaded[id]; ok {
			return hh
		}
		var hh *harness.Harness
		if c, ok := in.arch.sources[id]; ok && c.Source != "" {
			if l, err := harness.Load("archived.star", []byte(c.Source), harness.Options{Contract: in.contract}); err == nil {
				hh = l
			} else {
				in.log.Debug("archive: an archived harness does not load; its record is skipped", "harness", id, "err", err)
			}
		}
		loaded[id] = hh
		return hh
	}
	var out []record
	for _, id := range in.arch.order {
		c := in.arch.sources[id]
		if c.ParentID == "" || c.ParentID == id {
			continue
		}
		delta, se, ok := h.paired(id, c.ParentID)
		if !ok {
			continue
		}
		child, parent := load(id), load(c.ParentID)
		if child == nil || parent == nil {
			continue
		}
		atoms, opaque := diffHarnesses(in.contract, parent, child)
		if len(atoms) == 0 && !opaque {
			continue
		}
		name := c.Name
		if name == "" {
			name = id
		}
		out = append(out, record{id: id, name: name, atoms: atoms, opaque: opaque, delta: delta, se: se})
	}
	return out
}

// diffHarnesses is child's edit of parent: the contract constants whose
// values differ, and whether code besides their assignments differs too
// (or a changed value has no literal the backend can write back).
func diffHarnesses(c *harness.Contract, parent, child *harness.Harness) ([]atom, bool) {
	pv, cv := parent.Constants(), child.Constants()
	var atoms []atom
	opaque := false
	skip := map[string]bool{}
	for _, spec := range c.Constants {
		skip[spec.Name] = true
		if reflect.DeepEqual(pv[spec.Name], cv[spec.Name]) {
			continue
		}
		v, ok := cv[spec.Name]
		if !ok {
			opaque = true
			continue
		}
		lit, ok := literalOf(v)
		if !ok {
			opaque = true
			continue
		}
		axis := constAxis[spec.Name]
		if promptNames[spec.Name] {
			axis = "prompt"
		} else if axis == "" {
			axis = "other"
		}
		atoms = append(atoms, atom{constant: spec.Name, literal: lit, value: v, axis: axis})
	}
	pf, err1 := parse("parent.star", parent.Source())
	cf, err2 := parse("child.star", child.Source())
	if err1 != nil || err2 != nil || !slices.Equal(canonicalStmts(pf, skip), canonicalStmts(cf, skip)) {
		opaque = true
	}
	return atoms, opaque
}

// literalOf spells a constant's value as Starlark source; ok is false for
// lists, dicts and anything else the backend does not write.
func literalOf(v any) (string, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return "True", true
		}
		return "False", true
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") { // 2 → 2.0: a float, not an int
			s += ".0"
		}
		return s, true
	case string:
		return quote(x), true
	}
	return "", false
}
