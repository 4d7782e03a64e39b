package searchqa

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

// fakeRetriever is a FAKE retriever for tests: it answers every query with
// the passages it holds (cut to topk) or with err, and records the calls.
type fakeRetriever struct {
	passages []Passage
	err      error
	queries  []string
	topks    []int
}

func (f *fakeRetriever) Retrieve(_ context.Context, queries []string, topk int) ([][]Passage, error) {
	f.queries = append(f.queries, queries...)
	f.topks = append(f.topks, topk)
	if f.err != nil {
		return nil, f.err
	}
	out := make([][]Passage, len(queries))
	for i := range queries {
		out[i] = f.passages[:min(topk, len(f.passages))]
	}
	return out, nil
}

func loadHarness(t *testing.T, src string) *harness.Harness {
	t.Helper()
	h, err := harness.Load("h.star", []byte(src), harness.Options{Contract: Contract()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var frankenstein = schemas.Task{ID: "sqa-1", Domain: "searchqa", Question: "Who wrote the novel Frankenstein?",
	Answers: []string{"Mary Shelley", "Mary Wollstonecraft Shelley"}}

func newEnv(t *testing.T, r Retriever, h *harness.Harness) episode.Env {
	t.Helper()
	env, err := NewDomain(r).NewEnv(context.Background(), frankenstein, h)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := env.Reset(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if obs["question"] != frankenstein.Question {
		t.Fatalf("Reset = %v, want the question", obs)
	}
	return env
}

func TestEnvAnswers(t *testing.T) {
	tests := []struct {
		answer string
		reward float64
	}{
		{"Mary Shelley", 1},
		{"  the mary wollstonecraft shelley. ", 1},
		{"Percy Shelley", 0},
		{"Mary Shelley wrote it", 0},
		{"", 0},
	}
	for _, tt := range tests {
		t.Run(tt.answer, func(t *testing.T) {
			env := newEnv(t, nil, nil)
			st, err := env.Step(context.Background(), harness.Action{Kind: "answer", Answer: tt.answer})
			if err != nil {
				t.Fatal(err)
			}
			if !st.Done || st.Outcome.Reward != tt.reward || st.Outcome.Correct != (tt.reward == 1) || st.Outcome.Answer != tt.answer {
				t.Errorf("Step = %+v, want done with reward %v", st, tt.reward)
			}
		})
	}
}

func TestEnvSearchOverIndex(t *testing.T) {
	ix := testIndex(t)
	tests := []struct {
		name     string
		src      string
		topk     int
		maxChars int
	}{
		{"defaults", "", 3, 2000},
		{"one short passage", "TOPK = 1\nMAX_DOC_CHARS = 60\n", 1, 60},
		{"two", "TOPK = 2\nMAX_DOC_CHARS = 120\n", 2, 120},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, ix, loadHarness(t, tt.src))
			st, err := env.Step(context.Background(), harness.Action{Kind: "tool", Tool: "search", Input: " Frankenstein novel author "})
			if err != nil {
				t.Fatal(err)
			}
			if st.Done || st.Illegal != "" || st.ToolError != "" {
				t.Fatalf("Step = %+v, want a tool result", st)
			}
			res := st.ToolResult.(map[string]any)
			if res["query"] != "Frankenstein novel author" {
				t.Errorf("query = %q", res["query"])
			}
			passages := res["passages"].([]any)
			if len(passages) != tt.topk {
				t.Fatalf("%d passages, want %d", len(passages), tt.topk)
			}
			first := passages[0].(map[string]any)
			if first["title"] != "Frankenstein" || first["id"] != "0" || first["score"].(float64) <= 0 {
				t.Errorf("first passage = %v, want Frankenstein (id 0) with a score", first)
			}
			lines := strings.Split(strings.TrimSuffix(res["text"].(string), "\n"), "\n")
			if len(lines) != tt.topk || !strings.HasPrefix(lines[0], "Doc 1(Title: Frankenstein) ") {
				t.Errorf("text = %q, want %d lines starting Doc 1(Title: Frankenstein)", res["text"], tt.topk)
			}
			for i, p := range passages {
				c := p.(map[string]any)["contents"].(string)
				if n := utf8.RuneCountInString(c); n > tt.maxChars {
					t.Errorf("passage %d has %d characters, more than MAX_DOC_CHARS %d", i, n, tt.maxChars)
				}
				if !strings.HasPrefix(lines[i], "Doc ") {
					t.Errorf("line %d = %q", i, lines[i])
				}
			}
		})
	}
}

func TestSearchResultCuts(t *testing.T) {
	long := "\"Title é\"\n" + strings.Repeat("é", 100)
	res := SearchResult("q", []Passage{
		{ID: "a", Title: "Title é", Contents: long, Score: 2},
		{ID: "b", Contents: "\"Other\"\nshort", Score: 1},
		{ID: "c", Contents: "Third\nx", Score: 0.5},
	}, 2, 20)
	ps := res["passages"].([]any)
	if len(ps) != 2 {
		t.Fatalf("%d passages, want 2 (topk)", len(ps))
	}
	got := ps[0].(map[string]any)["contents"].(string)
	if want := "\"Title é\"\n" + strings.Repeat("é", 10); got != want {
		t.Errorf("cut contents = %q, want %q", got, want)
	}
	if ps[1].(map[string]any)["title"] != "Other" {
		t.Errorf("title from contents = %v", ps[1])
	}
	if want := "Doc 1(Title: Title é) " + strings.Repeat("é", 10) + "\nDoc 2(Title: Other) short\n"; res["text"] != want {
		t.Errorf("text = %q, want %q", res["text"], want)
	}
}

func TestEnvRejectsAndToolErrors(t *testing.T) {
	ctx := context.Background()
	down := &fakeRetriever{err: errors.New("connection refused")}
	tests := []struct {
		name                     string
		r                        Retriever
		action                   harness.Action
		wantIllegal, wantToolErr string
	}{
		{"unknown tool", &fakeRetriever{}, harness.Action{Kind: "tool", Tool: "python", Input: "1+1"}, `unknown tool "python"`, ""},
		{"move", &fakeRetriever{}, harness.Action{Kind: "move", Move: "e2e4"}, "no moves", ""},
		{"no retriever", nil, harness.Action{Kind: "tool", Tool: "search", Input: "x"}, "", "no retriever configured"},
		{"empty query", &fakeRetriever{}, harness.Action{Kind: "tool", Tool: "search", Input: "  "}, "", "empty search query"},
		{"huge query", &fakeRetriever{}, harness.Action{Kind: "tool", Tool: "search", Input: strings.Repeat("x", maxQueryBytes+1)}, "", "limit"},
		{"retriever down", down, harness.Action{Kind: "tool", Tool: "search", Input: "x"}, "", "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, tt.r, nil)
			st, err := env.Step(ctx, tt.action)
			if err != nil {
				t.Fatal(err)
			}
			if st.Done || st.ToolResult != nil {
				t.Errorf("Step = %+v, want no result", st)
			}
			if (tt.wantIllegal == "") != (st.Illegal == "") || !strings.Contains(st.Illegal, tt.wantIllegal) {
				t.Errorf("Illegal = %q, want %q", st.Illegal, tt.wantIllegal)
			}
			if (tt.wantToolErr == "") != (st.ToolError == "") || !strings.Contains(st.ToolError, tt.wantToolErr) {
				t.Errorf("ToolError = %q, want %q", st.ToolError, tt.wantToolErr)
			}
		})
	}
}

func TestEnvNativeCallArgs(t *testing.T) {
	f := &fakeRetriever{passages: []Passage{{ID: "1", Title: "T", Contents: "T\nbody"}}}
	env := newEnv(t, f, loadHarness(t, "TOPK = 7\n"))
	st, err := env.Step(context.Background(), harness.Action{Kind: "tool", Tool: "search", Args: map[string]any{"query": "from args"}})
	if err != nil || st.ToolResult == nil {
		t.Fatalf("Step = %+v, %v", st, err)
	}
	if len(f.queries) != 1 || f.queries[0] != "from args" || f.topks[0] != 7 {
		t.Errorf("retriever got %q topk %v, want [from args] 7", f.queries, f.topks)
	}
}

func TestEnvCancelledSearchIsAnError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	env := newEnv(t, &fakeRetriever{err: context.Canceled}, nil)
	if _, err := env.Step(ctx, harness.Action{Kind: "tool", Tool: "search", Input: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestEnvFinalAndBadTasks(t *testing.T) {
	env := newEnv(t, nil, nil)
	if out := env.Final(context.Background()); out.Reward != 0 || out.Correct {
		t.Errorf("Final = %+v, want reward 0", out)
	}
	d := NewDomain(nil)
	for _, task := range []schemas.Task{
		{ID: "no-question", Answers: []string{"a"}},
		{ID: "no-answers", Question: "q?"},
	} {
		if _, err := d.NewEnv(context.Background(), task, nil); err == nil || !strings.Contains(err.Error(), task.ID) {
			t.Errorf("NewEnv(%s) err = %v, want one naming the task", task.ID, err)
		}
	}
	other, err := harness.Load("other.star", nil, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.NewEnv(context.Background(), frankenstein, other); err == nil || !strings.Contains(err.Error(), "TOPK") {
		t.Errorf("NewEnv with a base-contract harness: err = %v, want one naming TOPK", err)
	}
}

func TestTagsHarness(t *testing.T) {
	d := NewDomain(nil)
	if d.Name() != "searchqa" || d.Contract().Name != "searchqa" {
		t.Fatalf("Name %q, contract %q", d.Name(), d.Contract().Name)
	}
	warnings, err := harness.Check("h0.star", Harnesses()["h0-tags"], harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("h0 warnings: %v", warnings)
	}
	h := loadHarness(t, string(Harnesses()["h0-tags"]))
	if h.Int("MAX_TURNS") != 2 {
		t.Errorf("MAX_TURNS = %d, want 2", h.Int("MAX_TURNS"))
	}
	ctx := context.Background()
	first, err := h.Call(ctx, "format_observation", map[string]any{"question": "Who wrote Frankenstein?"})
	if err != nil {
		t.Fatal(err)
	}
	if s := first.(string); !strings.Contains(s, "<search> query </search>") || !strings.HasSuffix(s, "Question: Who wrote Frankenstein?\n") {
		t.Errorf("first message = %q", s)
	}
	tests := []struct {
		reply string
		want  harness.Action
	}{
		{"<think>hm</think><search> Frankenstein author </search>", harness.Action{Kind: "tool", Tool: "search", Input: "Frankenstein author"}},
		{"<think>sure</think>\n<answer> Mary Shelley </answer>", harness.Action{Kind: "answer", Answer: "Mary Shelley"}},
		// The first closed tag is the action, as where Search-R1 stops generating.
		{"<search>a</search><information>made up</information><answer>b</answer>", harness.Action{Kind: "tool", Tool: "search", Input: "a"}},
		{"<answer>b</answer> then <search>a</search>", harness.Action{Kind: "answer", Answer: "b"}},
		{"<search></search><answer>c</answer>", harness.Action{Kind: "answer", Answer: "c"}},
		{"<search>a</answer>", harness.Action{Kind: "invalid"}},
		{"I think it is Mary Shelley.", harness.Action{Kind: "invalid"}},
	}
	for _, tt := range tests {
		v, err := h.Call(ctx, "parse_action", tt.reply, map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := harness.ActionFrom(v)
		if err != nil {
			t.Fatal(err)
		}
		if a.Kind != tt.want.Kind || a.Answer != tt.want.Answer || a.Tool != tt.want.Tool || a.Input != tt.want.Input {
			t.Errorf("parse_action(%q) = %+v, want %+v", tt.reply, a, tt.want)
		}
	}
	text, err := h.Call(ctx, "format_tool_result", SearchResult("q", []Passage{{ID: "0", Contents: "\"T\"\nbody"}}, 3, 100), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "\n\n<information>Doc 1(Title: T) body</information>\n\n"; text != want {
		t.Errorf("format_tool_result = %q, want %q", text, want)
	}
}
