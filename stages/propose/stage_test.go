package propose

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	harchive "github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

var h0ID = harness.SourceID([]byte(fakeBaseline))

func mutateConfig(m int) Config {
	return Config{Backend: BackendMutate, M: m, Parent: ParentH0, Iteration: 1, Domain: "fake"}
}

func TestStageMutate(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		tasks := commitTasks(t, s)
		st := &Stage{Domain: &fakeDomain{}}
		m, cands, rej := runStage(t, s, st, mutateConfig(3), 11, tasks)
		if len(cands) != 3 || len(rej) != 0 {
			t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
		}
		for _, c := range cands {
			if c.HarnessID != harness.SourceID([]byte(c.Source)) || c.ParentID != h0ID || c.Proposer != "mutate" || c.Axis == "" || c.Hypothesis == "" {
				t.Fatalf("bad row %+v", c)
			}
		}
		sum := m.Summary
		if sum["proposed"] != 3.0 || sum["valid"] != 3.0 || sum["rejected"] != 0.0 || sum["parent"] != h0ID || sum["backend"] != "mutate" {
			t.Fatalf("summary %v", sum)
		}
		// Idempotent: a rerun is a no-op.
		res, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-h02", Config: mutateConfig(3), Seed: 11, Inputs: []stages.InputRef{tasks}, Log: quiet}, st)
		if err != nil || !res.Skipped {
			t.Fatalf("rerun: %+v %v", res, err)
		}
		// Deterministic: the same seed elsewhere proposes the same harnesses.
		res, err = stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-h03", Config: mutateConfig(3), Seed: 11, Inputs: []stages.InputRef{tasks}, Log: quiet}, st)
		if err != nil {
			t.Fatal(err)
		}
		again := readCandidates(t, s, res.Manifest)
		if names(again) != names(cands) || again[0].Source != cands[0].Source {
			t.Fatalf("same seed gave %s, then %s", names(cands), names(again))
		}
	})
}

func TestStageMutatePromptOnly(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	cfg := mutateConfig(4)
	cfg.PromptOnly = true
	_, cands, rej := runStage(t, s, &Stage{Domain: &fakeDomain{}}, cfg, 5, tasks)
	if len(cands) != 4 || len(rej) != 0 {
		t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
	}
	for _, c := range cands {
		if c.Axis != "prompt" {
			t.Fatalf("prompt_only candidate %s on axis %s", c.Name, c.Axis)
		}
	}
}

// llmStage serves the llm backend from a fake OpenAI-compatible server
// through a real models.Client.
func llmStage(t *testing.T, h modeltest.Handler) (*Stage, *modeltest.Server) {
	t.Helper()
	srv := modeltest.NewServer(t, h)
	client, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "proposer", Retry: models.RetryPolicy{Attempts: 1}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return &Stage{Domain: &fakeDomain{}, LLM: client}, srv
}

func llmConfig(m int) Config {
	return Config{Backend: BackendLLM, M: m, Parent: ParentH0, Iteration: 2, Domain: "fake", LLM: LLMConfig{Model: "proposer", MaxTokens: 4096}}
}

const badParse = `
SYSTEM_PROMPT = "Answer in <answer></answer>."

def parse_action(text, state):
    if "<answer>" in text:
        return {"kind": "answer", "answer": text}
    return {"kind": "invalid", "error": state["no_such_key"]}
`

func TestStageLLM(t *testing.T) {
	good := withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = 6")
	syntaxErr := withLine(t, fakeBaseline, "def parse_action(text, state):", "def parse_action(text, state)")
	cases := []struct {
		name       string
		reply      string
		wantValid  string // candidate names
		wantKinds  string
		wantReason []string
	}{
		{"good reply", reply([3]string{"more turns", "turns", good}), "more-turns", "no_code,no_code", []string{"the reply had 1 code blocks for 3 candidates"}},
		{"no code", "I would raise MAX_TURNS, but I will not write code.", "", "no_code,no_code,no_code", []string{"no code in reply"}},
		{"syntax error", reply([3]string{"broken", "parsing", syntaxErr}, [3]string{"fine", "turns", good}), "fine", "no_code,invalid", []string{"broken.star:13:1", "got newline, want ':'"}},
		{"contract violation", reply([3]string{"too many turns", "turns", withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = 100")}), "", "no_code,no_code,invalid", []string{"too-many-turns.star:5:", "MAX_TURNS"}},
		{"runtime error in parse_action", reply([3]string{"bad parse", "parsing", badParse}), "", "no_code,no_code,dry_run", []string{"dry run on task t1", "hook parse_action", "bad-parse.star:6:"}},
		{"over m", reply([3]string{"a", "turns", good}, [3]string{"b", "turns", withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = 5")},
			[3]string{"c", "turns", withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = 3")}, [3]string{"d", "turns", withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = 2")}), "a,b,c", "over_limit", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t, "mem://")
			tasks := commitTasks(t, s)
			st, srv := llmStage(t, modeltest.Always(modeltest.Reply{Content: c.reply}))
			m, cands, rej := runStage(t, s, st, llmConfig(3), 1, tasks)
			if names(cands) != c.wantValid || kinds(rej) != c.wantKinds {
				t.Fatalf("valid %q (want %q), rejected %q (want %q): %+v", names(cands), c.wantValid, kinds(rej), c.wantKinds, rej)
			}
			all := ""
			for _, r := range rej {
				all += r.Reason + "\n"
				if r.Proposer != "llm:proposer" {
					t.Errorf("rejection proposer %q", r.Proposer)
				}
			}
			for _, w := range c.wantReason {
				if !strings.Contains(all, w) {
					t.Errorf("reasons %q lack %q", all, w)
				}
			}
			if srv.Calls() != 1 {
				t.Errorf("%d model calls, want 1", srv.Calls())
			}
			if got := m.Summary["rejected"]; got != float64(len(rej)) {
				t.Errorf("summary rejected %v, want %d", got, len(rej))
			}
		})
	}
}

func TestStageLLMModelDown(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	st, _ := llmStage(t, modeltest.Always(modeltest.Reply{Fault: modeltest.FaultStatus, Status: 401}))
	_, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-h02", Config: llmConfig(2), Seed: 1, Inputs: []stages.InputRef{tasks}, Log: quiet}, st)
	if err == nil || !strings.Contains(err.Error(), "llm proposer") {
		t.Fatalf("err = %v, want the model failure", err)
	}
}

// evaluateFixture is what an evaluate stage leaves: evals, rollouts with
// traces, and frontier.json.
// passed[id] is how many of the test tasks the harness solved.
func evaluateFixture(passed map[string]int) *fixture {
	var evals []schemas.Eval
	var rolls []schemas.Rollout
	for id, n := range passed {
		for i, task := range testTasks {
			reward := 0.0
			if i < n {
				reward = 1
			}
			evals = append(evals, schemas.Eval{HarnessID: id, TaskID: task.ID, K: 1, MeanReward: reward, PassAtK: reward, MeanTurns: 2})
			rolls = append(rolls, schemas.Rollout{HarnessID: id, TaskID: task.ID, Reward: reward, FinishReason: "max_turns", Turns: 2,
				Messages: []schemas.Message{{Role: "user", Content: "Question: " + task.Question}, {Role: "assistant", Content: "I think UNIQUE-FAILURE-MARK"}},
				Trace:    []schemas.TraceEvent{{Turn: 1, Kind: "hook", Action: "parse_action(...)", Feedback: "invalid"}}})
		}
	}
	return &fixture{name: "evaluate", files: map[string]func(io.Writer) (int64, error){
		"evals.parquet":    parquetOf(schemas.Evals, evals),
		"rollouts.parquet": parquetOf(schemas.Rollouts, rolls),
		"frontier.json":    jsonOf(map[string]any{"candidates": []any{}}),
	}}
}

func TestStageLLMPrompt(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	archived := withLine(t, fakeBaseline, "TOPK = 3", "TOPK = 5")
	archivedID := harness.SourceID([]byte(archived))
	props := commit(t, s, "r001-h01", &fixture{name: "propose", files: map[string]func(io.Writer) (int64, error){
		"candidates.parquet": parquetOf(schemas.Candidates, []schemas.Candidate{{HarnessID: archivedID, ParentID: h0ID, Name: "topk-5", Hypothesis: "more passages", Axis: "retrieval", Proposer: "mutate", Source: archived}}),
	}}, "archive-1")
	eval := commit(t, s, "r001-h01", evaluateFixture(map[string]int{h0ID: 1, archivedID: 2}), "archive-0")

	st, srv := llmStage(t, modeltest.Always(modeltest.Reply{Content: "nothing"}))
	cfg := llmConfig(2)
	cfg.Parent = archivedID
	_, _, rej := runStage(t, s, st, cfg, 1, tasks, eval, props)
	if kinds(rej) != "no_code,no_code" {
		t.Fatalf("rejected %+v", rej)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || len(reqs[0].Messages) != 2 {
		t.Fatalf("requests %+v", reqs)
	}
	prompt := reqs[0].Messages[1].Content
	for _, want := range []string{
		"Propose 2 new harness candidates", "## Constants", "TOPK", // the contract doc
		"# Parent harness topk-5", "TOPK = 5", "Success rate 0.667",
		"UNIQUE-FAILURE-MARK", "name: short-kebab-case-name", "```python",
		"h0 (", "0.333",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if reqs[0].Body["max_tokens"] != 4096.0 {
		t.Errorf("max_tokens %v", reqs[0].Body["max_tokens"])
	}
}

func TestStageDuplicates(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	archived := withLine(t, fakeBaseline, "TOPK = 3", "TOPK = 5")
	props := commit(t, s, "r001-h01", &fixture{name: "propose", files: map[string]func(io.Writer) (int64, error){
		"candidates.parquet": parquetOf(schemas.Candidates, []schemas.Candidate{{HarnessID: harness.SourceID([]byte(archived)), ParentID: h0ID, Name: "topk-5", Axis: "retrieval", Source: archived}}),
	}}, "archive-0")
	relaid := withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = (4)   # same budget, new comment")
	fresh := withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = 7")
	st, _ := llmStage(t, modeltest.Always(modeltest.Reply{Content: reply(
		[3]string{"same as parent", "prompt", strings.TrimSuffix(fakeBaseline, "\n")},
		[3]string{"relaid", "turns", relaid},
		[3]string{"archived again", "retrieval", archived},
		[3]string{"fresh", "turns", fresh},
		[3]string{"fresh again", "turns", fresh},
	)}))
	_, cands, rej := runStage(t, s, st, llmConfig(5), 1, tasks, props)
	if names(cands) != "fresh" || kinds(rej) != "duplicate,duplicate,duplicate,duplicate" {
		t.Fatalf("valid %s, rejected %+v", names(cands), rej)
	}
	for i, want := range []string{"the parent", "the parent", "archived candidate topk-5", "candidate fresh of this batch"} {
		if !strings.Contains(rej[i].Reason, want) {
			t.Errorf("rejection %d: %q lacks %q", i, rej[i].Reason, want)
		}
	}
	if !strings.Contains(rej[1].Reason, "up to comments and layout") {
		t.Errorf("relaid parent: %q", rej[1].Reason)
	}
}

func TestStagePromptOnly(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	turns := withLine(t, fakeBaseline, "MAX_TURNS = 4", "MAX_TURNS = 6")
	prompt := withLine(t, fakeBaseline, `SYSTEM_PROMPT = "Answer the question`, `SYSTEM_PROMPT = "Think first. Answer the question`)
	both := withLine(t, prompt, "MAX_TURNS = 4", "MAX_TURNS = 6")
	samePrompt := withLine(t, fakeBaseline, `SYSTEM_PROMPT = "Answer the question inside <answer></answer> tags. Search with <search>query</search>."`,
		`SYSTEM_PROMPT = "Answer the question inside <answer></answer> tags. " + "Search with <search>query</search>."`)
	relaid := withLine(t, prompt, "# h0 of the fake domain.", "# a new comment")
	st, _ := llmStage(t, modeltest.Always(modeltest.Reply{Content: reply(
		[3]string{"turns", "turns", turns},
		[3]string{"prompt", "prompt", prompt},
		[3]string{"both", "prompt", both},
		[3]string{"same prompt", "prompt", samePrompt},
		[3]string{"relaid", "prompt", relaid},
	)}))
	cfg := llmConfig(5)
	cfg.PromptOnly = true
	_, cands, rej := runStage(t, s, st, cfg, 1, tasks)
	if names(cands) != "prompt" || kinds(rej) != "prompt_only,prompt_only,duplicate,duplicate" {
		t.Fatalf("valid %s, rejected %+v", names(cands), rej)
	}
	if !strings.Contains(rej[0].Reason, "turns.star:5") {
		t.Errorf("prompt_only reason %q does not point at MAX_TURNS", rej[0].Reason)
	}
	if !strings.Contains(rej[2].Reason, "parent's values") {
		t.Errorf("same-value prompt: %q", rej[2].Reason)
	}
}

func TestStageEnvErrorIsNotTheHarnesss(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	st := &Stage{Domain: &fakeDomain{envErr: errors.New("retriever down")}}
	m, cands, rej := runStage(t, s, st, mutateConfig(2), 3, tasks)
	if len(cands) != 2 || len(rej) != 0 {
		t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
	}
	if m.Summary["dry_run_env_errors"] == 0.0 {
		t.Fatalf("summary %v", m.Summary)
	}
}

func TestStageParent(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	stored := withLine(t, fakeBaseline, "TOPK = 3", "TOPK = 8")
	id := harness.SourceID([]byte(stored))
	cfg := mutateConfig(1)
	cfg.Parent = id

	// Not h0, not archived, no store: a clear error.
	_, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-h02", Config: cfg, Seed: 1, Inputs: []stages.InputRef{tasks}, Log: quiet}, &Stage{Domain: &fakeDomain{}})
	if err == nil || !strings.Contains(err.Error(), "harness store") {
		t.Fatalf("err = %v", err)
	}
	// From the bucket's harness store.
	if err := s.WriteAll(ctx, "harnesses/"+strings.TrimPrefix(id, "sha256:")+"/harness.star", []byte(stored)); err != nil {
		t.Fatal(err)
	}
	_, cands, _ := runStage(t, s, &Stage{Domain: &fakeDomain{}, Sources: StoreSources(s)}, cfg, 1, tasks)
	if len(cands) != 1 || cands[0].ParentID != id || !strings.Contains(cands[0].Source, "TOPK = 8") && cands[0].Axis != "retrieval" {
		t.Fatalf("candidates %+v", cands)
	}
	// A store that returns other bytes is caught.
	bad := &Stage{Domain: &fakeDomain{}, Sources: sourcesFunc(func(context.Context, string) ([]byte, error) { return []byte(fakeBaseline), nil })}
	cfg.Iteration = 9
	_, err = stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-h04", Config: cfg, Seed: 1, Inputs: []stages.InputRef{tasks}, Log: quiet}, bad)
	if err == nil || !strings.Contains(err.Error(), "whose id is") {
		t.Fatalf("err = %v", err)
	}
}

type sourcesFunc func(context.Context, string) ([]byte, error)

func (f sourcesFunc) Get(ctx context.Context, id string) ([]byte, error) { return f(ctx, id) }

func TestConfigValidate(t *testing.T) {
	ok := mutateConfig(3)
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"backend", func(c *Config) { c.Backend = "magic" }, "backend"},
		{"m", func(c *Config) { c.M = 0 }, "m 0"},
		{"parent", func(c *Config) { c.Parent = "best" }, "parent"},
		{"agent command", func(c *Config) { c.Backend = BackendAgent }, "agent_command"},
		{"agent env", func(c *Config) {
			c.Backend, c.AgentCommand, c.AgentEnv = BackendAgent, "true", []string{"ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"}
		}, "agent_env[1]: AWS_SECRET_ACCESS_KEY is refused"},
		{"llm model", func(c *Config) { c.Backend = BackendLLM }, "llm.model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.edit(&cfg)
			err := cfg.Validate()
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

// TestStageIncomingHarness: the phase's incoming harness was scored by id
// (no propose stage holds its source); the evaluate summary names it and
// the harness archive holds its source, so it can be the parent and the
// llm prompt shows it by name.
func TestStageIncomingHarness(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	incoming := withLine(t, fakeBaseline, "FORMAT_RETRIES = 1", "FORMAT_RETRIES = 3")
	id, err := harchive.Put(ctx, s, []byte(incoming))
	if err != nil {
		t.Fatal(err)
	}
	ev := evaluateFixture(map[string]int{id: 2, h0ID: 1})
	ev.summary = map[string]any{"candidates": []any{
		map[string]any{"harness_id": id, "name": "incoming", "success": 0.67},
		map[string]any{"harness_id": h0ID, "name": "h0"},
	}}
	eval := commit(t, s, "r001-h01", ev, "archive-0")
	st, srv := llmStage(t, modeltest.Always(modeltest.Reply{Content: reply([3]string{"fewer retries", "retries", withLine(t, incoming, "FORMAT_RETRIES = 3", "FORMAT_RETRIES = 2")})}))
	st.Sources = StoreSources(s)
	cfg := llmConfig(1)
	cfg.Parent = id
	_, cands, rej := runStage(t, s, st, cfg, 1, tasks, eval)
	if names(cands) != "fewer-retries" || len(rej) != 0 || cands[0].ParentID != id {
		t.Fatalf("candidates %+v, rejected %+v", cands, rej)
	}
	prompt := srv.Requests()[0].Messages[1].Content
	for _, want := range []string{"# Parent harness incoming (", "FORMAT_RETRIES = 3", "Success rate 0.667"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
}
