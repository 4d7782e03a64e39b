package propose

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
)

func TestClassifyFailure(t *testing.T) {
	toolErr := []schemas.TraceEvent{{Turn: 1, Kind: "tool", Action: `search("x")`, Feedback: "tool error: the retriever is down"}}
	okTool := []schemas.TraceEvent{{Turn: 1, Kind: "tool", Action: `search("x")`, Feedback: "result: {...}"}}
	for _, c := range []struct {
		name   string
		r      schemas.Rollout
		expect string
	}{
		{"format", schemas.Rollout{FinishReason: "format"}, failFormat},
		{"illegal", schemas.Rollout{FinishReason: "illegal"}, failTool},
		{"turns", schemas.Rollout{FinishReason: "max_turns", Trace: okTool}, failTurns},
		{"stopped", schemas.Rollout{FinishReason: "stopped"}, failTurns},
		{"turns after a tool error", schemas.Rollout{FinishReason: "max_turns", Trace: toolErr}, failTool},
		{"wrong answer", schemas.Rollout{FinishReason: "answer", Trace: okTool}, failWrong},
		{"wrong answer after a tool error", schemas.Rollout{FinishReason: "answer", Trace: toolErr}, failTool},
		{"error", schemas.Rollout{FinishReason: "error", Error: "hook parse_action: boom"}, failError},
	} {
		if got := classifyFailure(c.r); got != c.expect {
			t.Errorf("%s: %q, want %q", c.name, got, c.expect)
		}
	}
}

// synth is a synthetic archive of the fake domain: harnesses made by
// setting constants of h0, each scored per task on a model.
type synth struct {
	t    *testing.T
	dom  *fakeDomain
	arch *archive
	hist *history
}

const synthModel = "model-a"

// synthTasks is the search set of the synthetic archive.
var synthTasks = []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10"}

func newSynth(t *testing.T) *synth {
	s := &synth{t: t, dom: &fakeDomain{},
		arch: &archive{sources: map[string]archived{}, scores: map[string]*score{}, samples: map[string]*sampled{}},
		hist: &history{model: synthModel, tasks: map[string]map[string]map[string]*taskScore{}, failures: map[string]map[string]map[string]int{}}}
	h0 := harness.SourceID([]byte(fakeBaseline))
	s.arch.order = append(s.arch.order, h0)
	s.arch.sources[h0] = archived{Candidate: schemas.Candidate{HarnessID: h0, Name: "h0", Source: fakeBaseline}}
	return s
}

// child archives parent with constant = literal as a candidate called name.
func (s *synth) child(name, parent, constant, literal string) string {
	s.t.Helper()
	src, err := setConstant("p.star", []byte(s.arch.sources[parent].Source), constant, literal)
	if err != nil {
		s.t.Fatal(err)
	}
	id := harness.SourceID(src)
	s.arch.order = append(s.arch.order, id)
	s.arch.sources[id] = archived{Candidate: schemas.Candidate{HarnessID: id, ParentID: parent, Name: name, Source: string(src)}}
	return id
}

// score gives id the reward r on every task, plus noise[i] on task i.
func (s *synth) score(id, model string, r float64, noise ...float64) {
	byModel := s.hist.tasks[id]
	if byModel == nil {
		byModel = map[string]map[string]*taskScore{}
		s.hist.tasks[id] = byModel
	}
	byModel[model] = map[string]*taskScore{}
	for i, task := range synthTasks {
		v := r
		if i < len(noise) {
			v += noise[i]
		}
		byModel[model][task] = &taskScore{sum: v, n: 1}
	}
}

func (s *synth) fail(id string, counts map[string]int) {
	s.hist.failures[id] = map[string]map[string]int{synthModel: counts}
}

func (s *synth) input(parent string, seed int64, m int) *input {
	s.t.Helper()
	c := s.dom.Contract()
	h, err := harness.Load("parent.star", []byte(s.arch.sources[parent].Source), harness.Options{Contract: c})
	if err != nil {
		s.t.Fatal(err)
	}
	return &input{cfg: Config{Backend: BackendArchive, M: m, Iteration: 2, Domain: "fake", Parent: parent},
		seed: seed, contract: c, parent: h, arch: s.arch, log: quiet}
}

// constantsOf are the constants of a proposal's source.
func constantsOf(t *testing.T, p proposal) map[string]any {
	t.Helper()
	h, err := harness.Load(p.Name+".star", p.Source, harness.Options{Contract: (&fakeDomain{}).Contract()})
	if err != nil {
		t.Fatalf("%s does not load: %v", p.Name, err)
	}
	return h.Constants()
}

// standard is the archive the policy tests share: on model-a, from h0,
// TOPK=5 and VERBOSE=True each helped, MAX_TURNS=6 clearly hurt; h0
// failed mostly by running out of turns.
func standard(t *testing.T) (*synth, map[string]string) {
	s := newSynth(t)
	h0 := s.arch.order[0]
	ids := map[string]string{"h0": h0}
	ids["topk"] = s.child("topk-5", h0, "TOPK", "5")
	ids["verbose"] = s.child("verbose-true", h0, "VERBOSE", "True")
	ids["turns"] = s.child("max-turns-6", h0, "MAX_TURNS", "6")
	s.score(h0, synthModel, 0.3)
	s.score(ids["topk"], synthModel, 0.5)
	s.score(ids["verbose"], synthModel, 0.4)
	s.score(ids["turns"], synthModel, 0.1)
	s.fail(h0, map[string]int{failTurns: 40, failFormat: 5, failWrong: 20})
	return s, ids
}

func TestArchivePolicy(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) (*synth, string) // the archive and the parent
		m     int
		check func(t *testing.T, ps []proposal)
	}{
		{"combines the edits that helped, on the parent, first", func(t *testing.T) (*synth, string) {
			s, ids := standard(t)
			return s, ids["h0"]
		}, 3, func(t *testing.T, ps []proposal) {
			k := constantsOf(t, ps[0])
			if k["TOPK"] != int64(5) || k["VERBOSE"] != true || k["MAX_TURNS"] != int64(4) {
				t.Fatalf("first proposal %s: TOPK %v VERBOSE %v MAX_TURNS %v, want the combination 5, True, 4", ps[0].Name, k["TOPK"], k["VERBOSE"], k["MAX_TURNS"])
			}
			if !strings.HasPrefix(ps[0].Name, "combine-") || !strings.Contains(ps[0].Hypothesis, "TOPK → 5") || !strings.Contains(ps[0].Hypothesis, "VERBOSE → True") {
				t.Fatalf("combination %s: %s", ps[0].Name, ps[0].Hypothesis)
			}
		}},
		// On the parent topk-5, MAX_TURNS = 6 would be a new harness: only
		// the policy keeps it out.
		{"never proposes the edit that hurt on this model", func(t *testing.T) (*synth, string) {
			s, ids := standard(t)
			return s, ids["topk"]
		}, MaxCandidates, func(t *testing.T, ps []proposal) {
			for _, p := range ps {
				if constantsOf(t, p)["MAX_TURNS"] == int64(6) {
					t.Fatalf("%s sets MAX_TURNS = 6, which hurt on %s", p.Name, synthModel)
				}
			}
		}},
		{"an edit that hurt on another model is allowed", func(t *testing.T) (*synth, string) {
			s, ids := standard(t)
			// The drop was measured on an older model only.
			s.hist.tasks[ids["turns"]]["old-model"] = s.hist.tasks[ids["turns"]][synthModel]
			s.hist.tasks[ids["h0"]]["old-model"] = s.hist.tasks[ids["h0"]][synthModel]
			delete(s.hist.tasks[ids["turns"]], synthModel)
			return s, ids["topk"]
		}, MaxCandidates, func(t *testing.T, ps []proposal) {
			for _, p := range ps {
				if constantsOf(t, p)["MAX_TURNS"] == int64(6) {
					return
				}
			}
			t.Fatal("MAX_TURNS = 6 hurt only on another model, yet it is never proposed")
		}},
		{"a drop within the noise is not a hurt", func(t *testing.T) (*synth, string) {
			s, ids := standard(t)
			// -0.02 on average, but task by task ±0.5: no evidence.
			s.score(ids["turns"], synthModel, 0.28, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5)
			return s, ids["topk"]
		}, MaxCandidates, func(t *testing.T, ps []proposal) {
			for _, p := range ps {
				if constantsOf(t, p)["MAX_TURNS"] == int64(6) {
					return
				}
			}
			t.Fatal("MAX_TURNS = 6 dropped within the noise, yet it is never proposed")
		}},
		{"a helped edit the parent already has is not applied again", func(t *testing.T) (*synth, string) {
			s, ids := standard(t)
			return s, ids["topk"]
		}, 1, func(t *testing.T, ps []proposal) {
			k := constantsOf(t, ps[0])
			if k["TOPK"] != int64(5) || k["VERBOSE"] != true || !strings.HasPrefix(ps[0].Name, "reapply-verbose-true") {
				t.Fatalf("on the parent topk-5: %s (TOPK %v VERBOSE %v), want VERBOSE=True reapplied", ps[0].Name, k["TOPK"], k["VERBOSE"])
			}
		}},
		{"the second slot targets the dominant failure class", func(t *testing.T) (*synth, string) {
			s, ids := standard(t)
			return s, ids["h0"]
		}, 2, func(t *testing.T, ps []proposal) {
			if !strings.Contains(ps[1].Hypothesis, "targets turns failures: 40 of the parent's 65") {
				t.Fatalf("second proposal %s: %s", ps[1].Name, ps[1].Hypothesis)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, parent := c.setup(t)
			out, err := proposeFromArchive(s.input(parent, 7, c.m), s.hist)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.proposals) == 0 {
				t.Fatalf("no proposals; rejected %+v", out.rejected)
			}
			c.check(t, out.proposals)
		})
	}
}

// With no helped edit, the first proposals are new edits aimed at the
// class of most of the parent's failures, whichever it is.
func TestArchiveTargetsDominantFailure(t *testing.T) {
	for _, dominant := range failureClasses {
		t.Run(dominant, func(t *testing.T) {
			s := newSynth(t)
			h0 := s.arch.order[0]
			s.score(h0, synthModel, 0.3)
			counts := map[string]int{failFormat: 3, failTool: 3, failWrong: 3, failTurns: 3, failError: 50}
			counts[dominant] = 30
			s.fail(h0, counts)
			in := s.input(h0, 3, 2)
			out, err := proposeFromArchive(in, s.hist)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.proposals) != 2 {
				t.Fatalf("proposals %v, rejected %+v", proposalNames(out.proposals), out.rejected)
			}
			want := fmt.Sprintf("targets %s failures: 30 of the parent's 89", dominant)
			for _, p := range out.proposals {
				if !strings.Contains(p.Hypothesis, want) {
					t.Fatalf("%s: %q lacks %q", p.Name, p.Hypothesis, want)
				}
			}
			if out.summary["archive_dominant"] != dominant {
				t.Fatalf("summary %v", out.summary)
			}
		})
	}
}

func TestArchiveDeterministic(t *testing.T) {
	run := func(seed int64) []proposal {
		s, ids := standard(t)
		out, err := proposeFromArchive(s.input(ids["h0"], seed, 6), s.hist)
		if err != nil {
			t.Fatal(err)
		}
		return out.proposals
	}
	a, b := run(5), run(5)
	if len(a) != 6 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different proposals:\n%v\n%v", proposalNames(a), proposalNames(b))
	}
	differ := 0
	for s := range 8 {
		if !reflect.DeepEqual(proposalNames(a), proposalNames(run(int64(100+s)))) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("eight other seeds all gave the same proposals")
	}
}

// TestStageArchive runs the backend as a stage over committed archive
// inputs: candidates from a propose stage and what an evaluate stage
// left (evals per model id, rollouts with failures).
func TestStageArchive(t *testing.T) {
	for _, url := range []string{"mem://", "file://"} {
		t.Run(strings.TrimSuffix(url, "://"), func(t *testing.T) {
			if url == "file://" {
				url += t.TempDir()
			}
			s := openStore(t, url)
			ctx := context.Background()
			tasks := commitTasks(t, s)
			mk := func(name, constant, literal string) schemas.Candidate {
				src, err := setConstant("h0.star", []byte(fakeBaseline), constant, literal)
				if err != nil {
					t.Fatal(err)
				}
				return schemas.Candidate{HarnessID: harness.SourceID(src), ParentID: h0ID, Name: name, Axis: "x", Proposer: "mutate", Source: string(src)}
			}
			cands := []schemas.Candidate{mk("topk-5", "TOPK", "5"), mk("verbose-true", "VERBOSE", "True"), mk("max-turns-6", "MAX_TURNS", "6")}
			props := commit(t, s, "r001-h01", &fixture{name: "propose", files: map[string]func(io.Writer) (int64, error){
				"candidates.parquet": parquetOf(schemas.Candidates, cands),
			}}, "archive-1")
			// Mean reward on every task: h0 0.5, topk-5 0.75, verbose-true
			// 0.6, max-turns-6 0.1; h0's failures ran out of turns.
			reward := map[string]float64{h0ID: 0.5, cands[0].HarnessID: 0.75, cands[1].HarnessID: 0.6, cands[2].HarnessID: 0.1}
			var evals []schemas.Eval
			var rolls []schemas.Rollout
			for id, r := range reward {
				for _, task := range testTasks {
					evals = append(evals, schemas.Eval{HarnessID: id, ModelID: "m1", TaskID: task.ID, K: 4, MeanReward: r, MeanTurns: 2})
					finish := "max_turns"
					if id != h0ID {
						finish = "answer"
					}
					rolls = append(rolls, schemas.Rollout{HarnessID: id, ModelID: "m1", TaskID: task.ID, FinishReason: finish, Section: "harness"})
				}
			}
			// A test-section row is never read: its failure class would
			// otherwise dominate.
			for range 5 {
				rolls = append(rolls, schemas.Rollout{HarnessID: h0ID, ModelID: "m1", TaskID: "t9", FinishReason: "format", Section: sectionTest})
			}
			eval := commit(t, s, "r001-h01", &fixture{name: "evaluate", files: map[string]func(io.Writer) (int64, error){
				"evals.parquet":    parquetOf(schemas.Evals, evals),
				"rollouts.parquet": parquetOf(schemas.Rollouts, rolls),
			}}, "archive-2")

			cfg := Config{Backend: BackendArchive, M: 3, Parent: ParentH0, Iteration: 2, Domain: "fake"}
			st := &Stage{Domain: &fakeDomain{}}
			m, got, rej := runStage(t, s, st, cfg, 11, tasks, props, eval)
			if len(got) != 3 || len(rej) != 0 {
				t.Fatalf("candidates %s, rejected %+v", names(got), rej)
			}
			first, err := harness.Load("c.star", []byte(got[0].Source), harness.Options{Contract: st.Domain.Contract()})
			if err != nil {
				t.Fatal(err)
			}
			if k := first.Constants(); k["TOPK"] != int64(5) || k["VERBOSE"] != true || got[0].Proposer != "archive" || got[0].ParentID != h0ID {
				t.Fatalf("first candidate %+v, want the combination of topk-5 and verbose-true", got[0])
			}
			for _, c := range got {
				if strings.Contains(c.Source, "MAX_TURNS = 6") {
					t.Fatalf("%s repeats max-turns-6, which hurt", c.Name)
				}
			}
			sum := m.Summary
			if sum["backend"] != "archive" || sum["archive_model"] != "m1" || sum["archive_dominant"] != failTurns || sum["archive_helped"] != 2.0 || sum["archive_hurt"] != 1.0 {
				t.Fatalf("summary %v", sum)
			}
			// Deterministic: the same seed elsewhere proposes the same harnesses.
			res, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-h04", Config: cfg, Seed: 11,
				Inputs: []stages.InputRef{tasks, props, eval}, Log: quiet}, st)
			if err != nil {
				t.Fatal(err)
			}
			if again := readCandidates(t, s, res.Manifest); names(again) != names(got) {
				t.Fatalf("same seed gave %s, then %s", names(got), names(again))
			}
		})
	}
}

// Constants are matched to failure classes by their own words, not by the
// hooks their docs mention.
func TestEditTargetsByWords(t *testing.T) {
	c := (&fakeDomain{}).Contract()
	for _, tc := range []struct {
		spec harness.ConstSpec
		want []string
	}{
		{harness.ConstSpec{Name: "LENIENT_PARSE", Doc: "Whether parse_action takes the last integer."}, []string{failFormat}},
		{harness.ConstSpec{Name: "ANSWER_CUE", Doc: "Asks for the tagged answer format parse_action reads."}, []string{failFormat}},
		{harness.ConstSpec{Name: "MAX_TOOL_RESULT_CHARS", Doc: "Most characters of what format_tool_result returned."}, []string{failTool}},
		{harness.ConstSpec{Name: "SEARCH_DEPTH", Doc: "How deep to look."}, []string{failTool}},
		{harness.ConstSpec{Name: "HINTS", Doc: "Whether to add a hint."}, []string{failWrong}},
	} {
		e := edit{axis: "other", constant: tc.spec.Name, value: true}
		if got := editTargets(e, tc.spec, false); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.spec.Name, got, tc.want)
		}
	}
	// Budgets target their class only when raised.
	turns, _ := c.Const("MAX_TURNS")
	if got := editTargets(edit{axis: "turns", constant: "MAX_TURNS", value: int64(6)}, turns, int64(4)); !reflect.DeepEqual(got, []string{failTurns}) {
		t.Errorf("MAX_TURNS raised: %v", got)
	}
	if got := editTargets(edit{axis: "turns", constant: "MAX_TURNS", value: int64(2)}, turns, int64(4)); got != nil {
		t.Errorf("MAX_TURNS lowered: %v", got)
	}
}
