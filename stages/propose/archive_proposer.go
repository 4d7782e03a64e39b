package propose

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/stages"
)

// proposeArchive is the archive backend's row of the table.
func (*Stage) proposeArchive(ctx context.Context, x *stages.Exec, in *input) (outcome, error) {
	h, err := readHistory(ctx, x)
	if err != nil {
		return outcome{}, err
	}
	return proposeFromArchive(in, h)
}

// proposeFromArchive is the archive backend's policy (see the package
// doc): combinations of edits that helped, then new edits aimed at the
// parent's dominant failure class, never an edit that hurt on this model.
func proposeFromArchive(in *input, h *history) (outcome, error) {
	records := historyRecords(in, h)
	effects := map[string]*effect{}
	var order []string // atom keys, first seen first
	for _, r := range records {
		if r.opaque || len(r.atoms) != 1 {
			continue
		}
		a := r.atoms[0]
		e := effects[a.key()]
		if e == nil {
			e = &effect{atom: a}
			effects[a.key()] = e
			order = append(order, a.key())
		}
		e.records = append(e.records, r)
	}
	hurt := map[string]bool{}
	for k, e := range effects {
		if e.hurt() {
			hurt[k] = true
		}
	}
	// Combinations that hurt are refused as a whole too.
	hurtSets := map[string]bool{}
	for _, r := range records {
		if !r.opaque && len(r.atoms) > 1 && r.hurt() {
			hurtSets[atomSetKey(r.atoms)] = true
		}
	}

	parentVals := in.parent.Constants()
	var helped []*effect
	for _, k := range order {
		e := effects[k]
		if !e.helped() || reflect.DeepEqual(parentVals[e.constant], e.value) {
			continue
		}
		if in.cfg.PromptOnly && !promptNames[e.constant] {
			continue
		}
		helped = append(helped, e)
	}
	// Best first; one value per constant (the better one).
	slices.SortStableFunc(helped, func(a, b *effect) int { return cmp.Compare(b.mean(), a.mean()) })
	seenConst := map[string]bool{}
	helped = slices.DeleteFunc(helped, func(e *effect) bool {
		if seenConst[e.constant] {
			return true
		}
		seenConst[e.constant] = true
		return false
	})

	failures := h.failures[in.parent.ID()][h.model]
	scope := "the parent's"
	if total(failures) == 0 {
		failures = map[string]int{}
		scope = "the archive's"
		for _, byModel := range h.failures {
			for c, n := range byModel[h.model] {
				failures[c] += n
			}
		}
	}
	ranked := rankClasses(failures)

	// (a) combinations of helped edits on the parent: all of them, then
	// shorter prefixes of the best-first list, then each alone.
	var combos [][]*effect
	for n := len(helped); n >= 1; n-- {
		combos = append(combos, helped[:n])
	}
	if len(helped) > 1 {
		for _, e := range helped[1:] {
			combos = append(combos, []*effect{e})
		}
	}
	// (b) new single edits, dominant failure class first.
	tried := map[string]bool{}
	for k := range effects {
		tried[k] = true
	}
	fresh := targetedEdits(in, ranked, tried, hurt)

	known := map[string]bool{in.parent.ID(): true}
	for _, id := range in.arch.order {
		known[id] = true
	}
	var out outcome
	add := func(p proposal, src []byte) bool {
		id := harness.SourceID(src)
		if known[id] {
			return false
		}
		known[id] = true
		p.Source = src
		out.proposals = append(out.proposals, p)
		return true
	}
	// Slots alternate between the two kinds, a combination first, so that
	// a batch both exploits what helped and explores the dominant failure.
	ci, fi := 0, 0
	nextCombo := func() bool {
		for ; ci < len(combos); ci++ {
			set := combos[ci]
			atoms := make([]atom, len(set))
			for i, e := range set {
				atoms[i] = e.atom
			}
			if hurtSets[atomSetKey(atoms)] {
				continue
			}
			src, ok := applyAtoms(in, atoms)
			if ok && add(comboProposal(set, h.model), src) {
				ci++
				return true
			}
		}
		return false
	}
	nextFresh := func() bool {
		for ; fi < len(fresh); fi++ {
			f := fresh[fi]
			src, ok := applyAtoms(in, []atom{f.atom})
			if !ok {
				continue
			}
			p := proposal{Name: f.e.name, Axis: f.e.axis, edited: f.e.constant, Hypothesis: f.e.hypothesis}
			if f.class != "" {
				p.Hypothesis += fmt.Sprintf(" It targets %s failures: %d of %s %d failed search episodes.",
					f.class, failures[f.class], scope, total(failures))
			}
			if add(p, src) {
				fi++
				return true
			}
		}
		return false
	}
	for turn := 0; len(out.proposals) < in.cfg.M; turn++ {
		var ok bool
		if turn%2 == 0 {
			ok = nextCombo() || nextFresh()
		} else {
			ok = nextFresh() || nextCombo()
		}
		if !ok {
			break
		}
	}
	for slot := len(out.proposals); slot < in.cfg.M; slot++ {
		out.rejected = append(out.rejected, Rejection{
			Name: fmt.Sprintf("candidate-%d", slot+1), Kind: RejectNoCode,
			Reason: fmt.Sprintf("archive: only %d edits of the parent are new harnesses and not known to hurt on this model", len(out.proposals)),
		})
	}
	var dominant string
	if len(ranked) > 0 {
		dominant = ranked[0]
	}
	out.summary = map[string]any{
		"archive_model":     h.model,
		"archive_records":   len(records),
		"archive_helped":    len(helped),
		"archive_hurt":      len(hurt),
		"archive_failures":  failures,
		"archive_dominant":  dominant,
		"archive_new_edits": len(fresh) - countTried(fresh),
	}
	return out, nil
}

func countTried(fs []freshEdit) int {
	n := 0
	for _, f := range fs {
		if f.tried {
			n++
		}
	}
	return n
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// rankClasses lists the targetable classes with failures, most first
// (ties in failureClasses order).
func rankClasses(failures map[string]int) []string {
	var out []string
	for _, c := range failureClasses {
		if failures[c] > 0 {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return cmp.Compare(failures[b], failures[a]) })
	return out
}

func atomSetKey(atoms []atom) string {
	keys := make([]string, len(atoms))
	for i, a := range atoms {
		keys[i] = a.key()
	}
	slices.Sort(keys)
	return strings.Join(keys, "\x00")
}

func comboProposal(set []*effect, model string) proposal {
	var parts, names []string
	axis := set[0].axis
	for _, e := range set {
		var from []string
		for _, r := range e.records {
			from = append(from, r.name)
		}
		parts = append(parts, fmt.Sprintf("%s (%+.3f over %s: %s)", e.label(), e.mean(), pluralRuns(len(e.records)), strings.Join(from, ", ")))
		names = append(names, from[0])
		if e.axis != axis {
			axis = "combined"
		}
	}
	p := proposal{Axis: axis, edited: set[0].constant}
	if len(set) == 1 {
		p.Name = "reapply-" + names[0]
		p.Hypothesis = fmt.Sprintf("An edit that raised the search score over its parent on model %s helps the current best harness too: %s.", model, parts[0])
		return p
	}
	p.Name = "combine-" + strings.Join(names, "-")
	p.Hypothesis = fmt.Sprintf("Edits that each raised the search score over their parent on model %s add up when applied together: %s.", model, strings.Join(parts, "; "))
	return p
}

func pluralRuns(n int) string {
	if n == 1 {
		return "1 evaluation"
	}
	return fmt.Sprintf("%d evaluations", n)
}

// freshEdit is a single edit of the parent, with the failure class it
// targets ("" for none of the observed ones).
type freshEdit struct {
	e     edit
	atom  atom
	class string
	tried bool // a record changed the same constant to the same value on another parent
}

// targetedEdits are mutate's single edits of the parent that did not hurt
// on this model, in a seeded order, then stably sorted: edits no record
// tried before those tried on another parent (they may help this one),
// and within each, by the rank of the failure class each targets
// (untargeted ones last).
func targetedEdits(in *input, ranked []string, tried, hurt map[string]bool) []freshEdit {
	edits := candidateEdits(in.contract, in.parent, in.cfg.PromptOnly)
	rng := rand.New(rand.NewPCG(uint64(in.seed), uint64(in.cfg.Iteration)))
	rng.Shuffle(len(edits), func(i, j int) { edits[i], edits[j] = edits[j], edits[i] })
	rank := func(classes []string) (int, string) {
		for i, c := range ranked {
			if slices.Contains(classes, c) {
				return i, c
			}
		}
		return len(ranked), ""
	}
	type byRank struct {
		freshEdit
		r int
	}
	var out []byRank
	for _, e := range edits {
		a := atom{constant: e.constant, literal: e.literal, value: e.value, axis: e.axis}
		if lit, ok := literalOf(e.value); ok {
			a.literal = lit // the spelling records use, so that keys match
		}
		if hurt[a.key()] {
			continue
		}
		spec, _ := in.contract.Const(e.constant)
		r, c := rank(editTargets(e, spec, in.parent.Constants()[e.constant]))
		if tried[a.key()] {
			r += len(ranked) + 1
		}
		out = append(out, byRank{freshEdit{e: e, atom: a, class: c, tried: tried[a.key()]}, r})
	}
	slices.SortStableFunc(out, func(a, b byRank) int { return cmp.Compare(a.r, b.r) })
	res := make([]freshEdit, len(out))
	for i, o := range out {
		res[i] = o.freshEdit
	}
	return res
}

// promptTargets are the failure classes each prompt fragment of mutate
// (by its focus) is meant to cut.
var promptTargets = map[string][]string{
	"format":       {failFormat},
	"tools":        {failTool},
	"brevity":      {failTurns},
	"reasoning":    {failWrong},
	"verification": {failWrong},
	"focus":        {failWrong},
}

// editTargets are the failure classes an edit is meant to cut: by the
// prompt fragment's focus; for budgets, only when raised (FORMAT_RETRIES:
// format; ILLEGAL_RETRIES: tool; MAX_TURNS: turns; MAX_TOKENS: turns and
// format, since a cut reply fails to parse); tool and retrieval settings:
// tool and wrong; board settings: wrong and tool (illegal moves); any
// other constant by the words of its name and doc ("format", "parse",
// "tag": format; "tool", "search": tool), else wrong.
func editTargets(e edit, spec harness.ConstSpec, old any) []string {
	if e.axis == "prompt" {
		focus := e.name[strings.LastIndex(e.name, "-")+1:]
		return promptTargets[focus]
	}
	raised := false
	if o, ok := old.(int64); ok {
		n, _ := e.value.(int64)
		raised = n > o
	}
	switch e.constant {
	case "FORMAT_RETRIES":
		if raised {
			return []string{failFormat}
		}
		return nil
	case "ILLEGAL_RETRIES":
		if raised {
			return []string{failTool}
		}
		return nil
	case "MAX_TURNS":
		if raised {
			return []string{failTurns}
		}
		return nil
	case "MAX_TOKENS":
		if raised {
			return []string{failTurns, failFormat}
		}
		return nil
	}
	switch e.axis {
	case "retrieval", "tool-format":
		return []string{failTool, failWrong}
	case "board":
		return []string{failWrong, failTool}
	}
	// The name's parts and the doc's words; identifiers in the doc
	// (format_tool_result, parse_action) name hooks, not what the
	// constant is about.
	words := strings.Split(strings.ToLower(spec.Name), "_")
	for _, w := range strings.Fields(strings.ToLower(spec.Doc)) {
		if !strings.Contains(w, "_") {
			words = append(words, strings.Trim(w, ".,;:()`'\"<>/"))
		}
	}
	has := func(stems ...string) bool {
		return slices.ContainsFunc(words, func(w string) bool {
			return slices.ContainsFunc(stems, func(s string) bool { return strings.HasPrefix(w, s) })
		})
	}
	var out []string
	if has("format", "pars", "tag") {
		out = append(out, failFormat)
	}
	if has("tool", "search") {
		out = append(out, failTool)
	}
	if len(out) == 0 {
		out = append(out, failWrong)
	}
	return out
}

// applyAtoms sets each atom's constant in the parent's source and checks
// that every value takes effect (code below an assignment may recompute
// it); ok is false when one cannot be written or does not take effect.
func applyAtoms(in *input, atoms []atom) ([]byte, bool) {
	src := in.parent.Source()
	for _, a := range atoms {
		next, err := setConstant(in.parent.Filename(), src, a.constant, a.literal)
		if err != nil {
			if !errors.Is(err, errNotRewritable) {
				in.log.Debug("archive: edit not written", "edit", a.key(), "err", err)
			}
			return nil, false
		}
		src = next
	}
	h, err := harness.Load(in.parent.Filename(), src, harness.Options{Contract: in.contract})
	if err != nil {
		in.log.Debug("archive: edit does not load", "err", err)
		return nil, false
	}
	got := h.Constants()
	for _, a := range atoms {
		if !reflect.DeepEqual(got[a.constant], a.value) {
			return nil, false
		}
	}
	return src, true
}
