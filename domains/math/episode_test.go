package mathdomain

import (
	"context"
	"strings"
	"testing"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

// TestEpisodeH0 plays problems end to end: h0 through episode.Run against
// a fake model server that replies from a script, with the local Python
// runner (when this machine can run it) or a fake one.
func TestEpisodeH0(t *testing.T) {
	code := "Let me add them up.\n```python\nprint(sum(d for d in range(1, 361) if 360 % d == 0))\n```"
	tests := []struct {
		name    string
		replies []string
		finish  string
		reward  float64
		answer  string
		turns   int
		// inContext must appear in the messages of the last model call.
		inContext []string
	}{
		{"code, then the answer", []string{code, `The sum is \boxed{1170}.`}, episode.FinishAnswer, 1, "1170", 2, []string{"```output\n1170\n"}},
		{"answer at once", []string{`\boxed{1170}`}, episode.FinishAnswer, 1, "1170", 1, nil},
		{"wrong answer", []string{code, `\boxed{1171}`}, episode.FinishAnswer, 0, "1171", 2, nil},
		{"code twice runs out of turns", []string{code, code}, episode.FinishMaxTurns, 0, "", 2, nil},
		{"no box", []string{"It is 1170.", "Still 1170."}, episode.FinishMaxTurns, 0, "", 2, []string{"no final answer"}},
	}
	// Every case runs with a fake runner; the first also with python3
	// here, which is slow to start on a loaded machine.
	runners := []struct {
		name  string
		cases int
		new   func(t *testing.T) CodeRunner
	}{
		{"fake", len(tests), func(*testing.T) CodeRunner { return &fakeRunner{res: RunResult{Stdout: "1170\n", Status: StatusOK}} }},
		{"local", 1, func(t *testing.T) CodeRunner { return newLocal(t, nil) }},
	}
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			d := NewDomain(rn.new(t))
			h, err := harness.Load("h0.star", d.Baseline(), harness.Options{Contract: d.Contract()})
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range tests[:rn.cases] {
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
					res := episode.Run(context.Background(), d, h, m, divisors, episode.Config{Seed: 1})
					if res.Error != "" || res.FinishReason != tt.finish || res.Reward != tt.reward || res.Answer != tt.answer || res.Turns != tt.turns {
						t.Fatalf("Run = finish %q reward %v answer %q turns %d error %q, want %q %v %q %d",
							res.FinishReason, res.Reward, res.Answer, res.Turns, res.Error, tt.finish, tt.reward, tt.answer, tt.turns)
					}
					reqs := srv.Requests()
					if len(reqs) != tt.turns || reqs[0].Messages[0].Role != "system" || reqs[0].Messages[1].Content != divisors.Question {
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
		})
	}
}
