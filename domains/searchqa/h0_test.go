package searchqa

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

// TestHarnessTable: every built-in harness loads under the contract
// without warnings, "h0" is the Baseline, and the names are the ones the
// docs and examples give.
func TestHarnessTable(t *testing.T) {
	hs := Harnesses()
	if len(hs) != 3 || string(hs["h0"]) != string(NewDomain(nil).Baseline()) || hs["h0-tags"] == nil || hs["h0-local"] == nil {
		t.Fatalf("Harnesses() has %d entries; want h0 (the Baseline), h0-tags and h0-local", len(hs))
	}
	for name, src := range hs {
		warnings, err := harness.Check(name+".star", src, harness.Options{Contract: Contract()})
		if err != nil || len(warnings) > 0 {
			t.Errorf("%s: err %v, warnings %v", name, err, warnings)
		}
	}
}

// TestPaperH0Settings: the paper's h0 offers the native search tool, the
// top-1 passage cut near 200 tokens, two turns, no format retry.
func TestPaperH0Settings(t *testing.T) {
	h := loadHarness(t, string(Harnesses()["h0"]))
	tools := h.Tools()
	if len(tools) != 1 || tools[0].Name != ToolSearch {
		t.Errorf("tools %+v, want the native search tool", tools)
	}
	for name, want := range map[string]int{"MAX_TURNS": 2, "TOPK": 1, "MAX_DOC_CHARS": 800, "FORMAT_RETRIES": 0} {
		if got := h.Int(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}

// TestLocalH0: the search demo's harness shows only the sentences of the
// passages, one a line, and says so when a search found nothing.
func TestLocalH0(t *testing.T) {
	h := loadHarness(t, string(Harnesses()["h0-local"]))
	if tools := h.Tools(); len(tools) != 1 || tools[0].Name != ToolSearch || tools[0].CheckArgs(map[string]any{"query": "Fopa"}) != nil {
		t.Errorf("tools %+v, want search with one query", tools)
	}
	if h.Int("TOPK") != 1 || h.Int("MAX_TURNS") != 2 {
		t.Errorf("TOPK %d, MAX_TURNS %d, want 1 and 2", h.Int("TOPK"), h.Int("MAX_TURNS"))
	}
	for _, c := range []struct {
		passages []Passage
		want     string
	}{
		{[]Passage{{ID: "a", Contents: "Fopa\nFopa wears green."}, {ID: "b", Contents: "Fopa\nFopa keeps a seal."}}, "Fopa wears green.\nFopa keeps a seal."},
		{nil, "No results."},
	} {
		res := SearchResult("Fopa", c.passages, 3, 200)
		got, err := h.Call(context.Background(), "format_tool_result", res, map[string]any{})
		if err != nil || got != c.want {
			t.Errorf("format_tool_result(%d passages) = %q, %v; want %q", len(c.passages), got, err, c.want)
		}
	}
}

// longCorpus is a corpus whose Frankenstein passage runs to some 4,000
// characters (1,000 tokens), so that the cut shows, and a second
// Frankenstein passage that top-1 must leave out.
func longIndex(t *testing.T) *Index {
	t.Helper()
	body := "Frankenstein; or, The Modern Prometheus is an 1818 novel written by the English author Mary Shelley. " +
		strings.Repeat("The creature wanders the Alps and reads Paradise Lost by the fire. ", 60) + "TAILMARKER"
	lines := []map[string]string{
		{"id": "1", "contents": "\"Frankenstein\"\n" + body},
		{"id": "2", "contents": "\"Frankenstein (1931 film)\"\nFrankenstein is a 1931 horror film about the novel Frankenstein by Mary Shelley."},
		{"id": "3", "contents": "\"Percy Bysshe Shelley\"\nPercy Bysshe Shelley was an English poet, married to the author Mary Shelley."},
	}
	var b strings.Builder
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := BuildIndex(context.Background(), filepath.Join(dir, "idx"), FileCorpus(corpus), BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	x, err := OpenIndex(filepath.Join(dir, "idx"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// TestEpisodePaperH0 plays the paper's h0 against a scripted
// OpenAI-compatible model that calls the native search tool: the request
// offers the tool, the tool message holds one passage cut near 200 tokens
// (800 characters), a third call never happens (two turns), and the
// reward is the exact match of the last <answer>.
func TestEpisodePaperH0(t *testing.T) {
	search := func(queries ...string) modeltest.Reply {
		args, _ := json.Marshal(map[string]any{"query_list": queries})
		return modeltest.Reply{Reasoning: "I should look it up.", ToolCalls: []modeltest.ToolCall{{ID: "call-1", Name: "search", Arguments: string(args)}}}
	}
	answer := func(s string) modeltest.Reply { return modeltest.Reply{Content: "<answer>" + s + "</answer>"} }
	tests := []struct {
		name    string
		replies []modeltest.Reply
		finish  string
		reward  float64
		answer  string
		turns   int
		// passage: the second call's tool message is one cut passage.
		passage bool
	}{
		{"search, then the right answer", []modeltest.Reply{search("Modern Prometheus novel author"), answer("Mary Shelley")}, episode.FinishAnswer, 1, "Mary Shelley", 2, true},
		{"two queries: the first one's passage only", []modeltest.Reply{search("Modern Prometheus novel author", "Percy Bysshe Shelley poet"), answer("mary shelley")}, episode.FinishAnswer, 1, "mary shelley", 2, true},
		{"wrong answer", []modeltest.Reply{search("Modern Prometheus novel author"), answer("Percy Shelley")}, episode.FinishAnswer, 0, "Percy Shelley", 2, true},
		{"answer at once", []modeltest.Reply{answer("Mary Wollstonecraft Shelley")}, episode.FinishAnswer, 1, "Mary Wollstonecraft Shelley", 1, false},
		{"two searches run out of turns", []modeltest.Reply{search("Modern Prometheus"), search("Modern Prometheus author"), answer("Mary Shelley")}, episode.FinishMaxTurns, 0, "", 2, true},
		{"no answer and no call ends it", []modeltest.Reply{{Content: "Mary Shelley"}, answer("Mary Shelley")}, episode.FinishFormat, 0, "", 1, false},
	}
	d := NewDomain(longIndex(t))
	h, err := harness.Load("h0.star", d.Baseline(), harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Script(tt.replies...))
			m, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "fake-model"})
			if err != nil {
				t.Fatal(err)
			}
			res := episode.Run(context.Background(), d, h, m, frankenstein, episode.Config{Seed: 3})
			if res.Error != "" || res.FinishReason != tt.finish || res.Reward != tt.reward || res.Answer != tt.answer || res.Turns != tt.turns {
				t.Fatalf("Run = finish %q reward %v answer %q turns %d error %q, want %q %v %q %d",
					res.FinishReason, res.Reward, res.Answer, res.Turns, res.Error, tt.finish, tt.reward, tt.answer, tt.turns)
			}
			reqs := srv.Requests()
			if len(reqs) != tt.turns {
				t.Fatalf("%d model calls, want %d", len(reqs), tt.turns)
			}
			tools, _ := reqs[0].Body["tools"].([]any)
			fn, _ := func() (map[string]any, bool) {
				if len(tools) != 1 {
					return nil, false
				}
				tool, _ := tools[0].(map[string]any)
				f, ok := tool["function"].(map[string]any)
				return f, ok
			}()
			if fn["name"] != "search" || !strings.Contains(string(reqs[0].Raw), `"query_list"`) {
				t.Fatalf("the request does not offer the search tool: %s", reqs[0].Raw)
			}
			first := reqs[0].Messages
			if len(first) != 2 || first[0].Role != "system" || first[1].Role != "user" || !strings.HasPrefix(first[1].Content, "Question: "+frankenstein.Question+"\n") {
				t.Fatalf("first call's messages %+v", first)
			}
			if !tt.passage {
				return
			}
			msgs := reqs[1].Messages
			tool := msgs[len(msgs)-1]
			if tool.Role != "tool" || tool.ToolCallID != "call-1" {
				t.Fatalf("second call's last message %+v, want the tool result", tool)
			}
			n := utf8.RuneCountInString(tool.Content)
			if !strings.HasPrefix(tool.Content, "Doc 1(Title: Frankenstein) Frankenstein; or, The Modern Prometheus") ||
				strings.Contains(tool.Content, "Doc 2(") || strings.Contains(tool.Content, "Query 2") ||
				strings.Contains(tool.Content, "TAILMARKER") || strings.Contains(tool.Content, "Percy Bysshe") || n < 700 || n > 850 {
				t.Errorf("tool message (%d characters), want the top passage cut near 800 characters:\n%s", n, tool.Content)
			}
		})
	}
}
