package searchqa

import (
	"context"
	"strings"
	"testing"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

// TestEpisodeH0Tags plays questions end to end: h0-tags through episode.Run against
// a fake model server that replies from a script, searching the BM25 index
// of testdata/corpus.jsonl.
func TestEpisodeH0Tags(t *testing.T) {
	search := "<think>I need the author.</think>\n<search> Frankenstein novel author </search>"
	tests := []struct {
		name      string
		retriever Retriever
		replies   []string
		finish    string
		reward    float64
		answer    string
		turns     int
		// inContext must appear in the messages of the last model call.
		inContext []string
	}{
		{"search, then answer", testIndex(t), []string{search, "<think>It says Mary Shelley.</think>\n<answer> Mary Shelley </answer>"},
			episode.FinishAnswer, 1, "Mary Shelley", 2, []string{"<information>Doc 1(Title: Frankenstein) Frankenstein; or, The Modern Prometheus", "Doc 3("}},
		{"answer at once", testIndex(t), []string{"<answer>mary shelley</answer>"}, episode.FinishAnswer, 1, "mary shelley", 1, nil},
		{"wrong answer", testIndex(t), []string{search, "<answer>Percy Shelley</answer>"}, episode.FinishAnswer, 0, "Percy Shelley", 2, nil},
		{"two searches run out of turns", testIndex(t), []string{search, search}, episode.FinishMaxTurns, 0, "", 2, nil},
		{"no action, then an answer", testIndex(t), []string{"Mary Shelley.", "<answer>Mary Shelley</answer>"},
			episode.FinishAnswer, 1, "Mary Shelley", 2, []string{"My previous action is invalid."}},
		{"no retriever", nil, []string{search, "<answer>Mary Shelley</answer>"}, episode.FinishAnswer, 1, "Mary Shelley", 2,
			[]string{"no retriever configured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDomain(tt.retriever)
			h, err := harness.Load("h0.star", Harnesses()["h0-tags"], harness.Options{Contract: d.Contract()})
			if err != nil {
				t.Fatal(err)
			}
			replies := make([]modeltest.Reply, len(tt.replies))
			for i, r := range tt.replies {
				replies[i] = modeltest.Reply{Content: r}
			}
			srv := modeltest.NewServer(t, modeltest.Script(replies...))
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
			if len(reqs) != tt.turns || reqs[0].Messages[0].Role != "user" || !strings.HasSuffix(reqs[0].Messages[0].Content, "Question: "+frankenstein.Question+"\n") {
				t.Fatalf("%d requests; first messages %+v", len(reqs), reqs[0].Messages)
			}
			var last strings.Builder
			for _, msg := range reqs[len(reqs)-1].Messages {
				last.WriteString(msg.Content + "\n")
			}
			for _, w := range tt.inContext {
				if !strings.Contains(last.String(), w) {
					t.Errorf("the last call's context lacks %q:\n%s", w, last.String())
				}
			}
		})
	}
}

// playScript runs one episode of frankenstein with the harness src against
// a fake model that replies from the script, searching the test index.
func playScript(t *testing.T, src []byte, replies ...modeltest.Reply) (episode.Result, []modeltest.Request) {
	t.Helper()
	d := NewDomain(testIndex(t))
	h, err := harness.Load("h.star", src, harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	srv := modeltest.NewServer(t, modeltest.Script(replies...))
	m, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "fake-model"})
	if err != nil {
		t.Fatal(err)
	}
	return episode.Run(context.Background(), d, h, m, frankenstein, episode.Config{Seed: 3}), srv.Requests()
}

// TestEpisodeH0TagsKeepsNoInventedObservation: a model that writes its own
// <information> and an answer after </search> gets the real retrieval,
// and nothing it wrote after its search is stored (so none of it reaches
// the SFT table, which is made of the stored messages).
func TestEpisodeH0TagsKeepsNoInventedObservation(t *testing.T) {
	res, reqs := playScript(t, Harnesses()["h0-tags"],
		modeltest.Reply{Content: "<search>Frankenstein novel author</search><information>fake</information><answer>x</answer>"},
		modeltest.Reply{Content: "<answer>Mary Shelley</answer>"})
	if res.Error != "" || res.Reward != 1 || res.Turns != 2 {
		t.Fatalf("finish %s reward %v turns %d error %q", res.FinishReason, res.Reward, res.Turns, res.Error)
	}
	if got := res.Messages[1].Content; got != "<search>Frankenstein novel author</search>" {
		t.Errorf("stored assistant message %q", got)
	}
	for i, m := range res.Messages {
		if strings.Contains(m.Content, "fake") {
			t.Errorf("message %d keeps the invented observation: %q", i, m.Content)
		}
	}
	obs := reqs[1].Messages[2]
	if obs.Role != "user" || !strings.Contains(obs.Content, "<information>Doc 1(Title: Frankenstein)") {
		t.Errorf("observation %+v", obs)
	}
	stop, _ := reqs[0].Body["stop"].([]any)
	if len(stop) != 2 || stop[0] != "</search>" || stop[1] != "</answer>" {
		t.Errorf("stop sequences sent %v", reqs[0].Body["stop"])
	}
}

// nativeSrc is a harness with the native search tool: a list of queries,
// top-1 passage, and the result as the tool message.
const nativeSrc = `
TOOLS = ["search"]
TOPK = 1
SYSTEM_PROMPT = ""
USER_PROMPT = "Answer the question; search if you need to. Put the answer in <answer></answer>. Question: {question}"
`

func TestEpisodeNativeSearch(t *testing.T) {
	res, reqs := playScript(t, []byte(nativeSrc),
		modeltest.Reply{Reasoning: "Who wrote it?", ToolCalls: []modeltest.ToolCall{
			{ID: "c1", Name: "search", Arguments: `{"query_list": ["Frankenstein novel author", "Mary Shelley"]}`},
			{ID: "c2", Name: "search", Arguments: `{"query_list": "Frankenstein"}`},
		}},
		modeltest.Reply{Content: "<answer>Mary Shelley</answer>"})
	if res.Error != "" || res.Reward != 1 || res.Turns != 2 {
		t.Fatalf("finish %s reward %v turns %d error %q", res.FinishReason, res.Reward, res.Turns, res.Error)
	}
	tools, _ := reqs[0].Body["tools"].([]any)
	if len(tools) != 1 || !strings.Contains(string(reqs[0].Raw), `"query_list"`) {
		t.Fatalf("tools sent: %s", reqs[0].Raw)
	}
	msgs := reqs[1].Messages
	if len(msgs) != 4 || msgs[1].Role != "assistant" || msgs[2].Role != "tool" || msgs[3].Role != "tool" {
		t.Fatalf("second call's messages %+v", msgs)
	}
	if m := msgs[2]; m.ToolCallID != "c1" || !strings.Contains(m.Content, "Query 1: Frankenstein novel author\nDoc 1(Title: Frankenstein)") || !strings.Contains(m.Content, "Query 2: Mary Shelley") || strings.Contains(m.Content, "Doc 2(") {
		t.Errorf("search result message %+v", m)
	}
	if m := msgs[3]; m.ToolCallID != "c2" || !strings.Contains(m.Content, "/query_list: got string, want array") {
		t.Errorf("schema error message %+v", m)
	}
	if res.Messages[1].Reasoning != "Who wrote it?" {
		t.Errorf("reasoning not stored: %+v", res.Messages[1])
	}
}
