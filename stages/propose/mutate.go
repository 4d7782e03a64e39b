package propose

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/stages"
)

// constAxis is the mechanism each known constant belongs to; a domain
// constant missing here is "other".
var constAxis = map[string]string{
	"MAX_TURNS":        "turns",
	"MAX_TOKENS":       "turns",
	"FORMAT_RETRIES":   "retries",
	"ILLEGAL_RETRIES":  "retries",
	"TOPK":             "retrieval",
	"MAX_DOC_CHARS":    "retrieval",
	"CODE_TOOL":        "tool-format",
	"MAX_OUTPUT_CHARS": "tool-format",
	"BOARD_FORMAT":     "board",
	"SHOW_LEGAL_MOVES": "board",
	"MOVE_FORMAT":      "board",
}

// promptFragment is a sentence the mutate backend adds to SYSTEM_PROMPT
// (or puts in place of another fragment it added earlier).
type promptFragment struct {
	focus, text, why string
}

// systemFragments are the fixed list of SYSTEM_PROMPT edits: each names the
// failure it targets, which becomes the candidate's hypothesis.
var systemFragments = []promptFragment{
	{"reasoning", "Think step by step before you commit to a final answer.", "explicit step-by-step reasoning fixes answers given too early"},
	{"verification", "Before you answer, check your result against the question once more.", "a final self-check catches slips in otherwise sound work"},
	{"format", "Follow the required output format exactly: a reply in any other format is wasted.", "stressing the output format cuts format failures"},
	{"brevity", "Be concise: keep your reasoning short and to the point.", "shorter replies waste fewer turns and tokens"},
	{"tools", "When you are unsure, use the tools you are given to gather facts before answering.", "using the tools more often grounds answers in evidence"},
	{"focus", "Read the task carefully and identify exactly what is asked before you start.", "misread tasks are a common failure"},
}

// userSuffixes are the fixed USER_PROMPT edits: a line after the template.
var userSuffixes = []promptFragment{
	{"reasoning", "Think it through step by step.", "a reasoning cue next to the task is read more reliably than one in the system prompt"},
	{"format", "Give your final answer in the required format.", "a format reminder next to the task cuts format failures"},
}

// edit is one mechanism changed in the parent: a constant's new value.
type edit struct {
	axis, name, hypothesis string
	constant               string
	literal                string // Starlark source of the new value
	value                  any    // the new value, as harness.Constants gives it
}

// proposeMutate is the mutate backend's row of the table: it needs
// neither a model nor the Exec.
func (*Stage) proposeMutate(_ context.Context, _ *stages.Exec, in *input) (outcome, error) {
	return mutate(in)
}

// mutate is the offline backend: deterministic single edits of the
// parent's constants and prompts, drawn in an order seeded by the stage's
// seed and the iteration, skipping edits that give a harness already
// known. Under prompt_only only the prompts are edited.
func mutate(in *input) (outcome, error) {
	edits := candidateEdits(in.contract, in.parent, in.cfg.PromptOnly)
	rng := rand.New(rand.NewPCG(uint64(in.seed), uint64(in.cfg.Iteration)))
	rng.Shuffle(len(edits), func(i, j int) { edits[i], edits[j] = edits[j], edits[i] })

	known := map[string]bool{in.parent.ID(): true}
	for _, id := range in.arch.order {
		known[id] = true
	}
	var out outcome
	skipped := 0
	for _, e := range edits {
		if len(out.proposals) == in.cfg.M {
			break
		}
		src, err := setConstant(in.parent.Filename(), in.parent.Source(), e.constant, e.literal)
		if errors.Is(err, errNotRewritable) {
			in.log.Debug("mutate: edit skipped", "edit", e.name, "why", err)
			skipped++
			continue
		}
		if err != nil {
			return outcome{}, fmt.Errorf("propose: mutate %s: %w", e.name, err)
		}
		id := harness.SourceID(src)
		if known[id] {
			skipped++
			continue
		}
		known[id] = true
		// Code below the assignment may recompute the value (x = f(x)):
		// an edit that does not take effect is no edit.
		h, err := harness.Load(in.parent.Filename(), src, harness.Options{Contract: in.contract})
		if err != nil || !reflect.DeepEqual(h.Constants()[e.constant], e.value) {
			in.log.Debug("mutate: edit skipped: it does not take effect", "edit", e.name, "err", err)
			skipped++
			continue
		}
		out.proposals = append(out.proposals, proposal{Name: e.name, Hypothesis: e.hypothesis, Axis: e.axis, Source: src, edited: e.constant})
	}
	for slot := len(out.proposals); slot < in.cfg.M; slot++ {
		out.rejected = append(out.rejected, Rejection{
			Name: fmt.Sprintf("candidate-%d", slot+1), Kind: RejectNoCode,
			Reason: fmt.Sprintf("mutate: only %d new single edits of the parent exist", len(out.proposals)),
		})
	}
	out.summary = map[string]any{"mutate_edits": len(edits), "mutate_skipped": skipped}
	return out, nil
}

// candidateEdits lists every single edit of h's constants the contract
// bounds (ints with a range, bools, strings with an enum), and the prompt
// fragment edits, in contract order.
func candidateEdits(c *harness.Contract, h *harness.Harness, promptOnly bool) []edit {
	var edits []edit
	vals := h.Constants()
	for _, spec := range c.Constants {
		if promptNames[spec.Name] || promptOnly {
			continue
		}
		axis := constAxis[spec.Name]
		if axis == "" {
			axis = "other"
		}
		doc := firstSentence(spec.Doc)
		add := func(old, new any, lit string) {
			edits = append(edits, edit{
				value:      new,
				axis:       axis,
				name:       fmt.Sprintf("%s-%v", strings.ToLower(strings.ReplaceAll(spec.Name, "_", "-")), new),
				hypothesis: fmt.Sprintf("%s %v → %v (%s) %s.", spec.Name, old, new, doc, direction(old, new)),
				constant:   spec.Name,
				literal:    lit,
			})
		}
		switch spec.Type {
		case harness.TypeInt:
			if spec.Min == nil || spec.Max == nil {
				continue
			}
			v, ok := vals[spec.Name].(int64)
			if !ok {
				continue
			}
			for _, n := range intSteps(v, *spec.Max-*spec.Min) {
				if n >= *spec.Min && n <= *spec.Max && n != v {
					add(v, n, fmt.Sprint(n))
				}
			}
		case harness.TypeBool:
			v, ok := vals[spec.Name].(bool)
			if !ok {
				continue
			}
			lit := "True"
			if v {
				lit = "False"
			}
			add(v, !v, lit)
		case harness.TypeString:
			enum, ok := spec.Shape.(harness.Enum)
			v, isStr := vals[spec.Name].(string)
			if !ok || !isStr {
				continue
			}
			for _, e := range enum {
				if e != v {
					add(v, e, quote(e))
				}
			}
		}
	}
	edits = append(edits, promptEdits(c, vals)...)
	return edits
}

// intSteps are the values tried for an int constant: ±1 and ±2 for
// budgets with a small range (turns, retries, passages), halving and
// doubling for large ones (a budget of 2000 characters does not move by 1).
func intSteps(v, span int64) []int64 {
	if span <= 64 {
		return []int64{v - 2, v - 1, v + 1, v + 2}
	}
	return []int64{v / 2, v * 2}
}

func direction(old, new any) string {
	switch o := old.(type) {
	case int64:
		if new.(int64) > o {
			return "raised: a larger budget lets the model recover where the parent ran out"
		}
		return "lowered: a tighter budget cuts wasted turns and distraction without losing answers"
	case bool:
		if new.(bool) {
			return "switched on: the model gets help the parent withheld"
		}
		return "switched off: less noise in what the model sees"
	}
	return "changed: the model may read this presentation better"
}

func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSuffix(s, ".")
	s = strings.ReplaceAll(s, "`", "")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return strings.ToLower(s[:min(1, len(s))]) + s[min(1, len(s)):]
}

// promptEdits append a fragment to SYSTEM_PROMPT, replace a fragment an
// earlier edit added with another, or add a line to USER_PROMPT.
func promptEdits(c *harness.Contract, vals map[string]any) []edit {
	var edits []edit
	if spec, ok := c.Const("SYSTEM_PROMPT"); ok && spec.Type == harness.TypeString {
		sys, _ := vals["SYSTEM_PROMPT"].(string)
		var present []promptFragment
		for _, f := range systemFragments {
			if strings.Contains(sys, f.text) {
				present = append(present, f)
			}
		}
		for _, f := range systemFragments {
			if strings.Contains(sys, f.text) {
				continue
			}
			next := f.text
			if sys != "" {
				next = strings.TrimRight(sys, "\n ") + "\n\n" + f.text
			}
			edits = append(edits, edit{
				axis: "prompt", name: "system-prompt-" + f.focus, constant: "SYSTEM_PROMPT", literal: quote(next), value: next,
				hypothesis: fmt.Sprintf("Adding %q to SYSTEM_PROMPT helps: %s.", f.text, f.why),
			})
			for _, old := range present {
				edits = append(edits, edit{
					axis: "prompt", name: "system-prompt-" + old.focus + "-to-" + f.focus, constant: "SYSTEM_PROMPT",
					literal:    quote(strings.Replace(sys, old.text, f.text, 1)),
					value:      strings.Replace(sys, old.text, f.text, 1),
					hypothesis: fmt.Sprintf("Replacing %q by %q in SYSTEM_PROMPT helps: %s.", old.text, f.text, f.why),
				})
			}
		}
	}
	if spec, ok := c.Const("USER_PROMPT"); ok && spec.Type == harness.TypeTemplate {
		tmpl, _ := vals["USER_PROMPT"].(string)
		for _, f := range userSuffixes {
			if tmpl == "" || strings.Contains(tmpl, f.text) {
				continue
			}
			next := strings.TrimRight(tmpl, "\n ") + "\n\n" + f.text
			edits = append(edits, edit{
				axis: "prompt", name: "user-prompt-" + f.focus, constant: "USER_PROMPT", literal: quote(next), value: next,
				hypothesis: fmt.Sprintf("Ending USER_PROMPT with %q helps: %s.", f.text, f.why),
			})
		}
	}
	return edits
}
