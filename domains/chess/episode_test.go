package chess

import (
	"context"
	"strings"
	"testing"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

// TestEpisodeH0Compact plays puzzles end to end: h0-compact through episode.Run against a
// fake model server that replies from a script.
func TestEpisodeH0Compact(t *testing.T) {
	tests := []struct {
		name    string
		puzzle  string
		replies []string
		finish  string
		reward  float64
		answer  string
		turns   int
		// inContext must appear in the messages of the last model call.
		inContext []string
	}{
		{"solved in three moves", "00008", []string{
			"The rook goes to the seventh. <move>e6e7</move>",
			"Block with the knight: <move>Nc1</move>",
			"<move>Qxc1#</move>",
		}, episode.FinishAnswer, 1, "e6e7 b3c1 h6c1", 3, []string{"opponent played b1c1", "Correct."}},
		{"an illegal move, then right", "0000D", []string{
			"<move>e2e4</move>",
			"<move>Rd8</move>",
			"<move>f6d8</move>",
		}, episode.FinishAnswer, 1, "f8d8 f6d8", 3, []string{"illegal move", "opponent played d6d8"}},
		{"two illegal moves use up the retry", "0000D", []string{
			"<move>e2e4</move>",
			"<move>Kh1</move>",
		}, episode.FinishIllegal, 0, "", 2, []string{"illegal move"}},
		{"no move tag twice", "0000D", []string{
			"I would play the rook.",
			"Rd8",
		}, episode.FinishFormat, 0, "", 2, []string{"no move in <move></move> tags"}},
		{"a wrong move", "0000D", []string{"<move>Qxb3</move>"}, episode.FinishAnswer, 0, "b6b3", 1, nil},
	}
	d := NewDomain()
	h, err := harness.Load("h0.star", Harnesses()["h0-compact"], harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replies := make([]modeltest.Reply, len(tt.replies))
			for i, r := range tt.replies {
				replies[i] = modeltest.Reply{Content: r}
			}
			srv := modeltest.NewServer(t, modeltest.Script(replies...))
			m, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "fake-model"})
			if err != nil {
				t.Fatal(err)
			}
			res := episode.Run(context.Background(), d, h, m, taskByID(t, tt.puzzle), episode.Config{Seed: 7})
			if res.Error != "" || res.FinishReason != tt.finish || res.Reward != tt.reward || res.Answer != tt.answer || res.Turns != tt.turns {
				t.Fatalf("Run = finish %q reward %v answer %q turns %d error %q, want %q %v %q %d",
					res.FinishReason, res.Reward, res.Answer, res.Turns, res.Error, tt.finish, tt.reward, tt.answer, tt.turns)
			}
			reqs := srv.Requests()
			if len(reqs) != tt.turns || reqs[0].Messages[0].Role != "system" || !strings.Contains(reqs[0].Messages[0].Content, "<move>") {
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

// A harness cannot read the solution line from the task's meta: hooks see
// the meta without "moves", so a harness that tries to play them plays
// nothing and fails.
func TestHooksDoNotSeeTheSolution(t *testing.T) {
	d := NewDomain()
	src := `
def parse_action(text, state):
    meta = state["task"]["meta"]
    if "moves" in meta:
        return {"kind": "move", "move": meta["moves"][len(state["messages"]) // 2 * 2 + 1]}
    return {"kind": "invalid", "error": "meta keys: " + ",".join(sorted(meta.keys()))}
`
	h, err := harness.Load("cheat.star", []byte(src), harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "no idea"}))
	m, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "fake-model"})
	if err != nil {
		t.Fatal(err)
	}
	task := taskByID(t, "00008")
	if !strings.Contains(task.Meta, `"moves"`) {
		t.Fatalf("the test puzzle's meta has no moves: %s", task.Meta)
	}
	res := episode.Run(context.Background(), d, h, m, task, episode.Config{Seed: 1})
	if res.Reward != 0 || res.FinishReason != episode.FinishFormat {
		t.Fatalf("the cheating harness got reward %v, finish %s", res.Reward, res.FinishReason)
	}
	var seen string
	for _, e := range res.Trace {
		if e.Kind == episode.KindHook && strings.Contains(e.Feedback, "meta keys: ") {
			seen = e.Feedback
		}
	}
	if seen == "" || strings.Contains(seen, "moves") || !strings.Contains(seen, "fen") {
		t.Errorf("hooks saw meta keys %q; want the puzzle's without moves", seen)
	}
}
