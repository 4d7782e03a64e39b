package propose

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/chess"
	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
)

// realDomains are the shipped domains with their own contracts and h0s.
func realDomains() []episode.Domain {
	return []episode.Domain{chess.NewDomain(), mathdomain.NewDomain(nil), searchqa.NewDomain(nil), &fakeDomain{}}
}

func mutateInput(t testing.TB, dom episode.Domain, seed int64, iteration, m int, promptOnly bool) *input {
	t.Helper()
	c := dom.Contract()
	h, err := harness.Load("h0.star", dom.Baseline(), harness.Options{Contract: c})
	if err != nil {
		t.Fatalf("%s h0: %v", dom.Name(), err)
	}
	arch := &archive{sources: map[string]archived{}, scores: map[string]*score{}, samples: map[string]*sampled{}}
	return &input{cfg: Config{Backend: BackendMutate, M: m, Iteration: iteration, PromptOnly: promptOnly, Domain: dom.Name(), Parent: ParentH0},
		seed: seed, contract: c, parent: h, arch: arch, log: quiet}
}

func TestMutateDeterministic(t *testing.T) {
	for _, dom := range realDomains() {
		t.Run(dom.Name(), func(t *testing.T) {
			a, err := mutate(mutateInput(t, dom, 7, 2, 3, false))
			if err != nil {
				t.Fatal(err)
			}
			b, err := mutate(mutateInput(t, dom, 7, 2, 3, false))
			if err != nil {
				t.Fatal(err)
			}
			if len(a.proposals) != 3 || !reflect.DeepEqual(a.proposals, b.proposals) {
				t.Fatalf("same seed, different proposals:\n%v\n%v", proposalNames(a.proposals), proposalNames(b.proposals))
			}
			// Other seeds or iterations draw other edits (for some of 8 tries:
			// a single one may coincide by chance).
			differ := 0
			for s := range 8 {
				c, err := mutate(mutateInput(t, dom, int64(100+s), 3, 3, false))
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(proposalNames(a.proposals), proposalNames(c.proposals)) {
					differ++
				}
			}
			if differ == 0 {
				t.Fatal("eight other seeds all gave the same edits")
			}
		})
	}
}

func proposalNames(ps []proposal) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// TestMutateOneMechanism checks every edit the backend can make on the real
// contracts: it loads, changes exactly one constant's value (or one
// prompt), and leaves every other top-level statement as it was.
func TestMutateOneMechanism(t *testing.T) {
	for _, dom := range realDomains() {
		for _, promptOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/prompt_only=%v", dom.Name(), promptOnly), func(t *testing.T) {
				in := mutateInput(t, dom, 1, 1, MaxCandidates, promptOnly)
				out, err := mutate(in)
				if err != nil {
					t.Fatal(err)
				}
				if len(out.proposals) < 3 {
					t.Fatalf("only %d edits of %s", len(out.proposals), dom.Name())
				}
				parentTree, _ := parse("h0.star", in.parent.Source())
				before := in.parent.Constants()
				axes := map[string]bool{}
				for _, p := range out.proposals {
					h, err := harness.Load(p.Name+".star", p.Source, harness.Options{Contract: in.contract})
					if err != nil {
						t.Fatalf("%s does not load: %v\n%s", p.Name, err, p.Source)
					}
					if p.edited == "" {
						t.Fatalf("%s does not say which constant it edits", p.Name)
					}
					if reflect.DeepEqual(h.Constants()[p.edited], before[p.edited]) {
						t.Fatalf("%s leaves %s as it was", p.Name, p.edited)
					}
					// Only the edited constant's top-level assignments differ
					// (others may follow from it, e.g. a prompt that depends
					// on CODE_TOOL, but their code is untouched).
					f, _ := parse("c.star", p.Source)
					rest := map[string]bool{p.edited: true}
					if !slices.Equal(canonicalStmts(parentTree, rest), canonicalStmts(f, rest)) {
						t.Fatalf("%s changes more than %s:\n%s", p.Name, p.edited, p.Source)
					}
					if promptOnly && !promptNames[p.edited] {
						t.Fatalf("prompt_only edit %s changes %s", p.Name, p.edited)
					}
					if promptNames[p.edited] != (p.Axis == "prompt") {
						t.Fatalf("%s changes %s but its axis is %s", p.Name, p.edited, p.Axis)
					}
					if !slices.Contains(Axes, p.Axis) {
						t.Fatalf("%s: axis %q is not in Axes", p.Name, p.Axis)
					}
					if p.Hypothesis == "" {
						t.Fatalf("%s has no hypothesis", p.Name)
					}
					axes[p.Axis] = true
				}
				if !promptOnly && len(axes) < 2 {
					t.Fatalf("every edit of %s is on axes %v", dom.Name(), axes)
				}
			})
		}
	}
}

func TestMutateRespectsRanges(t *testing.T) {
	src := "MAX_TURNS = 1\nFORMAT_RETRIES = 16\n"
	dom := &fakeDomain{}
	h, err := harness.Load("p.star", []byte(src), harness.Options{Contract: dom.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range candidateEdits(dom.Contract(), h, false) {
		spec, _ := dom.Contract().Const(e.constant)
		if spec.Type != harness.TypeInt {
			continue
		}
		n := e.value.(int64)
		if n < *spec.Min || n > *spec.Max || n == int64(h.Int(e.constant)) {
			t.Errorf("%s → %d: out of [%d, %d] or no change", e.constant, n, *spec.Min, *spec.Max)
		}
		if e.constant == "FORMAT_RETRIES" && n != 15 && n != 14 {
			t.Errorf("FORMAT_RETRIES 16 → %d, want a small step down", n)
		}
	}
	for _, want := range []string{"max-turns-2", "max-turns-3", "style-fancy", "verbose-true", "max-tokens-4096", "max-tokens-16384"} {
		found := false
		for _, e := range candidateEdits(dom.Contract(), h, false) {
			found = found || e.name == want
		}
		if !found {
			t.Errorf("no edit %s", want)
		}
	}
}

func TestMutateSkipsKnownHarnesses(t *testing.T) {
	dom := &fakeDomain{}
	in := mutateInput(t, dom, 3, 1, 2, false)
	first, err := mutate(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range first.proposals {
		id := harness.SourceID(p.Source)
		in.arch.order = append(in.arch.order, id)
	}
	again, err := mutate(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range again.proposals {
		for _, q := range first.proposals {
			if string(p.Source) == string(q.Source) {
				t.Fatalf("mutate proposed %s again although the archive holds it", p.Name)
			}
		}
	}
}

func TestMutateRunsOut(t *testing.T) {
	// A parent whose only editable prompts are fixed by prompt_only and
	// every fragment already present: nothing is left to propose.
	dom := &fakeDomain{}
	var frags []string
	for _, f := range systemFragments {
		frags = append(frags, f.text)
	}
	var users []string
	for _, f := range userSuffixes {
		users = append(users, f.text)
	}
	src := fmt.Sprintf("SYSTEM_PROMPT = %s\nUSER_PROMPT = %s\n", quote(strings.Join(frags, "\n")), quote("{question}\n"+strings.Join(users, "\n")))
	h, err := harness.Load("p.star", []byte(src), harness.Options{Contract: dom.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	in := mutateInput(t, dom, 1, 1, 2, true)
	in.parent = h
	out, err := mutate(in)
	if err != nil {
		t.Fatal(err)
	}
	// Replacements are still possible only among absent fragments: none.
	if len(out.proposals) != 0 || len(out.rejected) != 2 || out.rejected[0].Kind != RejectNoCode {
		t.Fatalf("proposals %v, rejected %+v", proposalNames(out.proposals), out.rejected)
	}
}

func TestMutateReplacesFragment(t *testing.T) {
	dom := &fakeDomain{}
	first := systemFragments[0]
	src := fmt.Sprintf("SYSTEM_PROMPT = %s\n", quote("Solve it.\n\n"+first.text))
	h, err := harness.Load("p.star", []byte(src), harness.Options{Contract: dom.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	in := mutateInput(t, dom, 1, 1, MaxCandidates, true)
	in.parent = h
	out, err := mutate(in)
	if err != nil {
		t.Fatal(err)
	}
	replaced := 0
	for _, p := range out.proposals {
		if !strings.HasPrefix(p.Name, "system-prompt-"+first.focus+"-to-") {
			continue
		}
		replaced++
		c, err := harness.Load("c.star", p.Source, harness.Options{Contract: dom.Contract()})
		if err != nil {
			t.Fatal(err)
		}
		sys := c.String("SYSTEM_PROMPT")
		if strings.Contains(sys, first.text) || !strings.HasPrefix(sys, "Solve it.\n\n") {
			t.Fatalf("%s: SYSTEM_PROMPT %q", p.Name, sys)
		}
	}
	if replaced != len(systemFragments)-1 {
		t.Fatalf("%d replacements, want %d", replaced, len(systemFragments)-1)
	}
}
