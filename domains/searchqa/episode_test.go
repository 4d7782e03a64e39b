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

// TestEpisodeH0 plays questions end to end: h0 through episode.Run against
// a fake model server that replies from a script, searching the BM25 index
// of testdata/corpus.jsonl.
func TestEpisodeH0(t *testing.T) {
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
			h, err := harness.Load("h0.star", d.Baseline(), harness.Options{Contract: d.Contract()})
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
