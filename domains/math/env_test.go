package mathdomain

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

// fakeRunner is a FAKE code runner for tests: it returns res (or err) for
// every program and records the programs.
type fakeRunner struct {
	res   RunResult
	err   error
	codes []string
}

func (f *fakeRunner) Run(_ context.Context, code string) (RunResult, error) {
	f.codes = append(f.codes, code)
	return f.res, f.err
}

func loadHarness(t *testing.T, src string) *harness.Harness {
	t.Helper()
	h, err := harness.Load("h.star", []byte(src), harness.Options{Contract: Contract()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var divisors = schemas.Task{ID: "math-004", Domain: "math", Question: "Find the sum of all positive divisors of $360$.", Answers: []string{"1170"}}

func newEnv(t *testing.T, task schemas.Task, r CodeRunner, h *harness.Harness) episode.Env {
	t.Helper()
	env, err := NewDomain(r).NewEnv(context.Background(), task, h)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := env.Reset(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if obs["question"] != task.Question {
		t.Fatalf("Reset = %v, want the question", obs)
	}
	return env
}

func TestEnvAnswers(t *testing.T) {
	half := schemas.Task{ID: "half", Question: "q", Answers: []string{`The answer is $\boxed{\frac{1}{2}}$.`}}
	tests := []struct {
		name       string
		task       schemas.Task
		answer     string
		reward     float64
		wantAnswer string
	}{
		{"bare right", divisors, "1170", 1, "1170"},
		{"bare with spaces and separator", divisors, " 1,170 ", 1, "1,170"},
		{"bare wrong", divisors, "1171", 0, "1171"},
		{"boxed right", divisors, `So the sum is \boxed{1170}.`, 1, "1170"},
		{"last box wins", divisors, `\boxed{1000} no wait \boxed{1170}`, 1, "1170"},
		{"last box wrong", divisors, `\boxed{1170} no wait \boxed{1000}`, 0, "1000"},
		{"unclosed last box", divisors, `\boxed{1170} then \boxed{11`, 0, ""},
		{"bare fraction against boxed reference", half, "0.5", 1, "0.5"},
		{"bare latex fraction", half, `\dfrac{1}{2}`, 1, `\dfrac{1}{2}`},
		{"bare unbalanced braces", half, `1/2}`, 0, "1/2}"},
		{"empty", divisors, "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, tt.task, nil, nil)
			st, err := env.Step(context.Background(), harness.Action{Kind: "answer", Answer: tt.answer})
			if err != nil {
				t.Fatal(err)
			}
			if !st.Done || st.Outcome.Reward != tt.reward || st.Outcome.Correct != (tt.reward == 1) || st.Outcome.Answer != tt.wantAnswer {
				t.Errorf("Step = %+v, want done with reward %v answer %q", st, tt.reward, tt.wantAnswer)
			}
		})
	}
}

func TestEnvCodeRuns(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		res       RunResult
		stdout    string
		stderr    string
		truncated bool
		text      []string
	}{
		{"ok", "", RunResult{Stdout: "1170\n", Status: StatusOK}, "1170\n", "", false, []string{"1170\n"}},
		{"no output", "", RunResult{Status: StatusOK}, "", "", false, []string{"(no output)"}},
		{"error", "", RunResult{Stdout: "partial", Stderr: "Traceback\nZeroDivisionError", ExitCode: 1, Status: StatusError}, "partial",
			"Traceback\nZeroDivisionError", false, []string{"partial\nTraceback", "exit code 1"}},
		{"timeout", "", RunResult{Status: StatusTimeout, ExitCode: -9}, "", "", false, []string{"ran out of time"}},
		{"stdout cut", "MAX_OUTPUT_CHARS = 100\n", RunResult{Stdout: strings.Repeat("é", 150), Stderr: "warn", Status: StatusOK},
			strings.Repeat("é", 100), "", true, []string{"[output cut to 100 characters]"}},
		{"stderr gets the rest", "MAX_OUTPUT_CHARS = 100\n", RunResult{Stdout: strings.Repeat("a", 60), Stderr: strings.Repeat("b", 60), Status: StatusError, ExitCode: 1},
			strings.Repeat("a", 60), strings.Repeat("b", 40), true, []string{"cut to 100"}},
		{"runner cut", "", RunResult{Stdout: "x", Truncated: true, Status: StatusOK}, "x", "", true, []string{"cut"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRunner{res: tt.res}
			env := newEnv(t, divisors, f, loadHarness(t, tt.src))
			st, err := env.Step(context.Background(), harness.Action{Kind: "tool", Tool: "python", Input: "print(1170)"})
			if err != nil {
				t.Fatal(err)
			}
			if st.Done || st.Illegal != "" || st.ToolError != "" || len(f.codes) != 1 || f.codes[0] != "print(1170)" {
				t.Fatalf("Step = %+v (runs %q), want one run and a result", st, f.codes)
			}
			r := st.ToolResult.(map[string]any)
			if r["stdout"] != tt.stdout || r["stderr"] != tt.stderr || r["truncated"] != tt.truncated || r["status"] != tt.res.Status {
				t.Errorf("result = %v, want stdout %q stderr %q truncated %v", r, tt.stdout, tt.stderr, tt.truncated)
			}
			if n := utf8.RuneCountInString(r["stdout"].(string) + r["stderr"].(string)); n > loadHarness(t, tt.src).Int("MAX_OUTPUT_CHARS") {
				t.Errorf("%d characters of output, more than MAX_OUTPUT_CHARS", n)
			}
			for _, w := range tt.text {
				if !strings.Contains(r["text"].(string), w) {
					t.Errorf("text %q does not contain %q", r["text"], w)
				}
			}
		})
	}
}

func TestEnvRejectsAndToolErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name                     string
		src                      string
		r                        CodeRunner
		action                   harness.Action
		wantIllegal, wantToolErr string
	}{
		{"code tool off", "CODE_TOOL = False\n", &fakeRunner{}, harness.Action{Kind: "tool", Tool: "python", Input: "1"}, "switched off", ""},
		{"unknown tool", "", &fakeRunner{}, harness.Action{Kind: "tool", Tool: "search", Input: "x"}, `unknown tool "search"`, ""},
		{"move", "", &fakeRunner{}, harness.Action{Kind: "move", Move: "e4"}, "no moves", ""},
		{"no runner", "", nil, harness.Action{Kind: "tool", Tool: "python", Input: "print(1)"}, "", "no code runner configured"},
		{"empty program", "", &fakeRunner{}, harness.Action{Kind: "tool", Tool: "python", Input: "\n "}, "", "empty program"},
		{"runner down", "", &fakeRunner{err: ErrSandbox}, harness.Action{Kind: "tool", Tool: "python", Input: "print(1)"}, "", "code sandbox failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, divisors, tt.r, loadHarness(t, tt.src))
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
	// The code of a native call comes from its "code" argument.
	f := &fakeRunner{res: RunResult{Status: StatusOK}}
	env := newEnv(t, divisors, f, nil)
	if _, err := env.Step(ctx, harness.Action{Kind: "tool", Tool: "python", Args: map[string]any{"code": "print(2)"}}); err != nil || len(f.codes) != 1 || f.codes[0] != "print(2)" {
		t.Errorf("native call ran %q (err %v), want print(2)", f.codes, err)
	}
	// A run cut short by the caller is a failure of the episode, not of the tool.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	env = newEnv(t, divisors, &fakeRunner{err: context.Canceled}, nil)
	if _, err := env.Step(cctx, harness.Action{Kind: "tool", Tool: "python", Input: "1"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: err = %v, want context.Canceled", err)
	}
}

func TestEnvLocalPython(t *testing.T) {
	r := newLocal(t, nil)
	env := newEnv(t, divisors, r, loadHarness(t, "MAX_OUTPUT_CHARS = 100\n"))
	st, err := env.Step(context.Background(), harness.Action{Kind: "tool", Tool: "python",
		Input: "print(sum(d for d in range(1, 361) if 360 % d == 0))\nprint('x' * 500)"})
	if err != nil {
		t.Fatal(err)
	}
	res, ok := st.ToolResult.(map[string]any)
	if !ok || !strings.HasPrefix(res["stdout"].(string), "1170\nxxx") || res["truncated"] != true || utf8.RuneCountInString(res["stdout"].(string)) != 100 {
		t.Errorf("Step = %+v, want stdout 1170 then x's, cut to 100 characters", st)
	}
}

func TestEnvFinalAndBadTasks(t *testing.T) {
	env := newEnv(t, divisors, nil, nil)
	if out := env.Final(context.Background()); out.Reward != 0 || out.Correct {
		t.Errorf("Final = %+v, want reward 0", out)
	}
	d := NewDomain(nil)
	for _, task := range []schemas.Task{{ID: "no-question", Answers: []string{"1"}}, {ID: "no-answers", Question: "q?"}} {
		if _, err := d.NewEnv(context.Background(), task, nil); err == nil || !strings.Contains(err.Error(), task.ID) {
			t.Errorf("NewEnv(%s) err = %v, want one naming the task", task.ID, err)
		}
	}
	other, err := harness.Load("other.star", nil, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.NewEnv(context.Background(), divisors, other); err == nil || !strings.Contains(err.Error(), "CODE_TOOL") {
		t.Errorf("NewEnv with a base-contract harness: err = %v, want one naming CODE_TOOL", err)
	}
}

func TestTagsHarness(t *testing.T) {
	d := NewDomain(nil)
	if d.Name() != "math" || d.Contract().Name != "math" {
		t.Fatalf("Name %q, contract %q", d.Name(), d.Contract().Name)
	}
	warnings, err := harness.Check("h0.star", Harnesses()["h0-tags"], harness.Options{Contract: d.Contract()})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("h0 warnings: %v", warnings)
	}
	ctx := context.Background()
	h := loadHarness(t, string(Harnesses()["h0-tags"]))
	if h.Int("MAX_TURNS") != 2 || !h.Bool("CODE_TOOL") || !strings.Contains(h.String("SYSTEM_PROMPT"), "```python") {
		t.Errorf("MAX_TURNS %d, CODE_TOOL %v, SYSTEM_PROMPT %q", h.Int("MAX_TURNS"), h.Bool("CODE_TOOL"), h.String("SYSTEM_PROMPT"))
	}
	noCode := loadHarness(t, strings.Replace(string(Harnesses()["h0-tags"]), "CODE_TOOL = True", "CODE_TOOL = False", 1))
	if strings.Contains(noCode.String("SYSTEM_PROMPT"), "python") {
		t.Errorf("with CODE_TOOL off the prompt still offers Python: %q", noCode.String("SYSTEM_PROMPT"))
	}
	code := "```python\nprint(1)\n```"
	tests := []struct {
		h     *harness.Harness
		reply string
		want  harness.Action
	}{
		{h, `Adding up: \boxed{1170}.`, harness.Action{Kind: "answer", Answer: "1170"}},
		{h, "Let me compute.\n" + code, harness.Action{Kind: "tool", Tool: "python", Input: "print(1)\n"}},
		{h, "```python\nprint('\\\\boxed{5}')\n```", harness.Action{Kind: "tool", Tool: "python", Input: "print('\\\\boxed{5}')\n"}},
		{h, code + "\nSo \\boxed{7}", harness.Action{Kind: "answer", Answer: "7"}},
		{h, "I am not sure.", harness.Action{Kind: "invalid"}},
		{noCode, code, harness.Action{Kind: "invalid"}},
		{noCode, `\boxed{3}`, harness.Action{Kind: "answer", Answer: "3"}},
	}
	for _, tt := range tests {
		v, err := tt.h.Call(ctx, "parse_action", tt.reply, map[string]any{})
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
	text, err := h.Call(ctx, "format_tool_result", CodeResult(RunResult{Stdout: "1170\n", Status: StatusOK}, 100), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if s := text.(string); !strings.HasPrefix(s, "```output\n1170\n") || !strings.Contains(s, `\boxed{}`) {
		t.Errorf("format_tool_result = %q", s)
	}
}

// FuzzGrade checks that grading never panics and that a bare answer is
// graded as its own box.
func FuzzGrade(f *testing.F) {
	for _, s := range []string{"1170", `\frac{1}{2}`, `\boxed{5}`, "1/2}", "", `\boxed{`, "x = 5", "{", `\fbox{3}`} {
		f.Add(s, "1170")
		f.Add(s, `\boxed{\frac12}`)
	}
	f.Fuzz(func(t *testing.T, answer, ref string) {
		out := Grade(answer, []string{ref})
		if out.Correct != (out.Reward == 1) || (out.Reward != 0 && out.Reward != 1) {
			t.Fatalf("Grade(%q) = %+v", answer, out)
		}
		if strings.ContainsAny(answer, `\{}`) {
			return
		}
		boxed := Grade(`\boxed{`+answer+`}`, []string{ref})
		if boxed.Reward != out.Reward {
			t.Fatalf("Grade(%q) reward %v, boxed %v", answer, out.Reward, boxed.Reward)
		}
	})
}
