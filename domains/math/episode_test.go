package mathdomain

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
)

// TestEpisodeH0Tags plays problems end to end: h0-tags through episode.Run against
// a fake model server that replies from a script, with the local Python
// runner (when this machine can run it) or a fake one.
func TestEpisodeH0Tags(t *testing.T) {
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
			h, err := harness.Load("h0.star", Harnesses()["h0-tags"], harness.Options{Contract: d.Contract()})
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

// TestEpisodeNativeCodeInterpreter: the ReTool style, a native
// code_interpreter tool run by the local sandbox. Calls that run, print a
// megabyte, time out or do not match the tool's parameters each come back
// as a tool message the model sees; the episode goes on to its answer.
func TestEpisodeNativeCodeInterpreter(t *testing.T) {
	d := NewDomain(newLocal(t, func(o *LocalPythonOptions) { o.Timeout = 2 * time.Second }))
	src := `TOOLS = ["code_interpreter"]
SYSTEM_PROMPT = ""
MAX_TURNS = 3

def parse_action(text, state):
    a = extract_boxed(text)
    if a == None:
        return {"kind": "invalid", "error": "no \\boxed{} answer"}
    return {"kind": "answer", "answer": a}
`
	h, err := harness.Load("retool.star", []byte(src), harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	call := func(id, code string) modeltest.ToolCall {
		args, _ := json.Marshal(map[string]string{"code": code})
		return modeltest.ToolCall{ID: id, Name: "code_interpreter", Arguments: string(args)}
	}
	srv := modeltest.NewServer(t, modeltest.Script(
		modeltest.Reply{ToolCalls: []modeltest.ToolCall{
			call("a", "print(sum(d for d in range(1, 361) if 360 % d == 0))"),
			call("b", "print('x' * (1 << 20))"),
			call("c", "while True: pass"),
			{ID: "d", Name: "code_interpreter", Arguments: `{"program": "print(1)"}`},
		}},
		modeltest.Reply{Content: `The sum is \boxed{1170}.`},
	))
	m, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "fake-model"})
	if err != nil {
		t.Fatal(err)
	}
	res := episode.Run(context.Background(), d, h, m, divisors, episode.Config{Seed: 1})
	if res.Error != "" || res.Reward != 1 || res.Turns != 2 {
		t.Fatalf("finish %s reward %v turns %d error %q", res.FinishReason, res.Reward, res.Turns, res.Error)
	}
	msgs := srv.Requests()[1].Messages
	if len(msgs) != 6 {
		t.Fatalf("second call's messages %+v", msgs)
	}
	wants := []string{"1170", "output cut", "ran out of time", "missing property 'code'"}
	for i, w := range wants {
		m := msgs[2+i]
		if m.Role != "tool" || m.ToolCallID != string(rune('a'+i)) || !strings.Contains(strings.ToLower(m.Content), w) || len(m.Content) > 4000 {
			t.Errorf("tool message %d (%d bytes) %.200q, want it to contain %q", i, len(m.Content), m.Content, w)
		}
	}
	var tools int
	for _, ev := range res.Trace {
		if ev.Kind == episode.KindTool {
			tools++
		}
	}
	if tools != 4 {
		t.Errorf("%d tool events, want 4", tools)
	}
}
