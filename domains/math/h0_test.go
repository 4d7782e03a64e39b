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

// TestHarnessTable: every built-in harness loads under the contract
// without warnings, and "h0" is the Baseline.
func TestHarnessTable(t *testing.T) {
	hs := Harnesses()
	if len(hs) != 2 || string(hs["h0"]) != string(NewDomain(nil).Baseline()) || hs["h0-tags"] == nil {
		t.Fatalf("Harnesses() has %d entries; want h0 (the Baseline) and h0-tags", len(hs))
	}
	for name, src := range hs {
		warnings, err := harness.Check(name+".star", src, harness.Options{Contract: Contract()})
		if err != nil || len(warnings) > 0 {
			t.Errorf("%s: err %v, warnings %v", name, err, warnings)
		}
	}
}

// TestPaperH0Parse: the paper's h0 has no system prompt, offers the
// native code_interpreter, and reads only the last \boxed{} of the last
// 300 characters of a reply (verl's math_dapo).
func TestPaperH0Parse(t *testing.T) {
	h := loadHarness(t, string(Harnesses()["h0"]))
	if tools := h.Tools(); len(tools) != 1 || tools[0].Name != ToolCode {
		t.Errorf("tools %+v, want code_interpreter", tools)
	}
	if h.String("SYSTEM_PROMPT") != "" || h.Int("MAX_TURNS") != 2 || h.Int("FORMAT_RETRIES") != 0 {
		t.Errorf("SYSTEM_PROMPT %q, MAX_TURNS %d, FORMAT_RETRIES %d; want none, 2, 0",
			h.String("SYSTEM_PROMPT"), h.Int("MAX_TURNS"), h.Int("FORMAT_RETRIES"))
	}
	long := strings.Repeat("and then we check it again. ", 12) // 336 characters
	tests := []struct {
		reply string
		want  harness.Action
	}{
		{`So the sum is \boxed{1170}.`, harness.Action{Kind: "answer", Answer: "1170"}},
		{`First \boxed{1} then \boxed{1170}`, harness.Action{Kind: "answer", Answer: "1170"}},
		{`The sum is \boxed{1170}, ` + long, harness.Action{Kind: "invalid"}},
		{long + `so \boxed{1170}`, harness.Action{Kind: "answer", Answer: "1170"}},
		{"It is 1170.", harness.Action{Kind: "invalid"}},
		{"```python\nprint(1)\n```", harness.Action{Kind: "invalid"}},
	}
	for _, tt := range tests {
		v, err := h.Call(context.Background(), "parse_action", tt.reply, map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := harness.ActionFrom(v)
		if err != nil {
			t.Fatal(err)
		}
		if a.Kind != tt.want.Kind || a.Answer != tt.want.Answer {
			t.Errorf("parse_action(%q) = %s %q, want %s %q", tt.reply, a.Kind, a.Answer, tt.want.Kind, tt.want.Answer)
		}
	}
}

// TestEpisodePaperH0 plays the paper's h0 against a scripted
// OpenAI-compatible model that calls the native code_interpreter: the
// request offers the tool and has no system message, the program's output
// comes back as the tool message, a third call never happens (two turns)
// and the reward is the verifier's on the last box of the reply's tail.
func TestEpisodePaperH0(t *testing.T) {
	call := func(code string) modeltest.Reply {
		return modeltest.Reply{Reasoning: "Let me compute.", ToolCalls: []modeltest.ToolCall{
			{ID: "call-1", Name: "code_interpreter", Arguments: `{"code": ` + quote(code) + `}`}}}
	}
	sum := call("print(sum(d for d in range(1, 361) if 360 % d == 0))")
	tests := []struct {
		name    string
		replies []modeltest.Reply
		finish  string
		reward  float64
		answer  string
		turns   int
		// output must be the tool message of the second call.
		output string
	}{
		{"code, then the answer", []modeltest.Reply{sum, {Content: `The sum is \boxed{1170}.`}}, episode.FinishAnswer, 1, "1170", 2, "1170\n"},
		{"wrong answer", []modeltest.Reply{sum, {Content: `\boxed{1171}`}}, episode.FinishAnswer, 0, "1171", 2, "1170\n"},
		{"a box far from the end is no answer", []modeltest.Reply{sum, {Content: `\boxed{1170} ` + strings.Repeat("I double-check. ", 30)}}, episode.FinishFormat, 0, "", 2, "1170\n"},
		{"code twice runs out of turns", []modeltest.Reply{sum, sum, {Content: `\boxed{1170}`}}, episode.FinishMaxTurns, 0, "", 2, "1170\n"},
		{"answer at once", []modeltest.Reply{{Content: `\boxed{1170}`}}, episode.FinishAnswer, 1, "1170", 1, ""},
	}
	runner := &fakeRunner{res: RunResult{Stdout: "1170\n", Status: StatusOK}}
	d := NewDomain(runner)
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
			res := episode.Run(context.Background(), d, h, m, divisors, episode.Config{Seed: 1})
			if res.Error != "" || res.FinishReason != tt.finish || res.Reward != tt.reward || res.Answer != tt.answer || res.Turns != tt.turns {
				t.Fatalf("Run = finish %q reward %v answer %q turns %d error %q, want %q %v %q %d",
					res.FinishReason, res.Reward, res.Answer, res.Turns, res.Error, tt.finish, tt.reward, tt.answer, tt.turns)
			}
			reqs := srv.Requests()
			if len(reqs) != tt.turns {
				t.Fatalf("%d model calls, want %d", len(reqs), tt.turns)
			}
			if len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Name != ToolCode || !strings.Contains(string(reqs[0].Raw), `"tools"`) {
				t.Fatalf("the request does not offer code_interpreter: %s", reqs[0].Raw)
			}
			first := reqs[0].Messages
			if len(first) != 1 || first[0].Role != "user" || !strings.HasPrefix(first[0].Content, divisors.Question+"\n") || !strings.Contains(first[0].Content, `\boxed{answer}`) {
				t.Fatalf("first call's messages %+v, want the question alone as a user message", first)
			}
			if tt.output == "" {
				return
			}
			msgs := reqs[1].Messages
			if last := msgs[len(msgs)-1]; last.Role != "tool" || last.ToolCallID != "call-1" || last.Content != tt.output {
				t.Errorf("second call's last message %+v, want the tool result %q", last, tt.output)
			}
		})
	}
	if len(runner.codes) == 0 || !strings.Contains(runner.codes[0], "360 % d") {
		t.Errorf("programs run: %q", runner.codes)
	}
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
