package mathdomain

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

// Tool names: ToolPython is what a tag-based parse_action asks for,
// ToolCode the native tool (CodeTool). Both run the same sandbox.
const (
	ToolPython = "python"
	ToolCode   = "code_interpreter"
)

// baseline is h0, the paper's: ReTool-style with the native
// code_interpreter tool, no system prompt, two turns, the last \boxed{}
// of the reply's tail (see h0.star).
//
//go:embed h0.star
var baseline []byte

// tagsHarness is h0-tags: the Qwen-math instruction and one optional
// Python run written as a ```python block, two turns: whale's h0 before
// the paper's native-tool one.
//
//go:embed h0-tags.star
var tagsHarness []byte

// maxCodeBytes bounds one program sent to the runner; competition-math
// scratch code is a few kilobytes.
const maxCodeBytes = 64 << 10

// Domain is the math domain for the episode loop. Its environments run
// code through the CodeRunner it was made with.
type Domain struct {
	runner CodeRunner
}

// NewDomain returns the math domain. r may be nil: with CODE_TOOL on, each
// code run then gets the tool error "no code runner configured".
func NewDomain(r CodeRunner) *Domain { return &Domain{runner: r} }

var _ episode.Domain = (*Domain)(nil)

// Name is "math".
func (d *Domain) Name() string { return "math" }

// Contract is the domain's harness contract, Contract().
func (d *Domain) Contract() *harness.Contract { return Contract() }

// Baseline is the source of h0.
func (d *Domain) Baseline() []byte { return append([]byte(nil), baseline...) }

// Harnesses are the domain's built-in harnesses by name, the names an
// experiment's harness.initial may give: "h0" (Baseline, the paper's) and
// "h0-tags".
func Harnesses() map[string][]byte {
	return map[string][]byte{
		"h0":      append([]byte(nil), baseline...),
		"h0-tags": append([]byte(nil), tagsHarness...),
	}
}

// NewEnv makes the environment of one problem. CODE_TOOL and
// MAX_OUTPUT_CHARS come from h (the contract's defaults when h is nil).
func (d *Domain) NewEnv(_ context.Context, task schemas.Task, h *harness.Harness) (episode.Env, error) {
	if strings.TrimSpace(task.Question) == "" {
		return nil, fmt.Errorf("math task %q: empty question", task.ID)
	}
	if len(task.Answers) == 0 {
		return nil, fmt.Errorf("math task %q: no reference answer", task.ID)
	}
	e := &Env{task: task, runner: d.runner}
	if h == nil {
		c := Contract()
		ct, _ := c.Const("CODE_TOOL")
		mo, _ := c.Const("MAX_OUTPUT_CHARS")
		e.codeTool, e.maxOutput = ct.Default.(bool), mo.Default.(int)
		return e, nil
	}
	// Harness getters panic on a constant their contract lacks: a harness
	// loaded for another domain is the caller's mistake, reported here.
	for _, name := range []string{"CODE_TOOL", "MAX_OUTPUT_CHARS"} {
		if _, ok := h.Contract().Const(name); !ok {
			return nil, fmt.Errorf("math task %q: harness %s was loaded with contract %q, which has no %s: load it with the math contract",
				task.ID, h.Filename(), h.Contract().Name, name)
		}
	}
	e.codeTool, e.maxOutput = h.Bool("CODE_TOOL"), h.Int("MAX_OUTPUT_CHARS")
	return e, nil
}

// Env is one math episode. It is not safe for concurrent use.
type Env struct {
	task      schemas.Task
	runner    CodeRunner
	codeTool  bool
	maxOutput int
}

// Reset returns {"question": q}.
func (e *Env) Reset(context.Context) (map[string]any, error) {
	return map[string]any{"question": e.task.Question}, nil
}

// Step runs code or grades an answer.
//
// An answer is graded by the verifier (Verify). When the answer text holds
// \boxed or \fbox, its last box is the answer, exactly as for a whole model
// reply (so parse_action may pass the reply itself; an unclosed last box
// scores 0); otherwise the whole text, trimmed, is the answer, as though it
// were boxed (so parse_action may pass what extract_boxed returned).
// Outcome.Answer is the text graded.
//
// A python tool action, when CODE_TOOL is on, runs the code and returns
// {"stdout", "stderr", "status", "exit_code", "truncated", "text"}: stdout
// and stderr together hold at most MAX_OUTPUT_CHARS characters (stdout
// first), and text is what the model usually sees: the output, a note on
// a failed run and a note when output was cut.
func (e *Env) Step(ctx context.Context, a harness.Action) (episode.Step, error) {
	switch a.Kind {
	case "answer":
		return episode.Step{Done: true, Outcome: Grade(a.Answer, e.task.Answers)}, nil
	case "tool":
		if a.Tool != ToolPython && a.Tool != ToolCode {
			return episode.Step{Illegal: fmt.Sprintf("unknown tool %q: the code tool is %q (%q when called natively)", a.Tool, ToolPython, ToolCode)}, nil
		}
		if !e.codeTool {
			return episode.Step{Illegal: "the python tool is switched off (CODE_TOOL is False): give the answer in \\boxed{}"}, nil
		}
		return e.run(ctx, toolInput(a))
	case "move":
		return episode.Step{Illegal: "there are no moves in math: give the answer in \\boxed{}"}, nil
	}
	return episode.Step{}, fmt.Errorf("math task %q: step with action kind %q", e.task.ID, a.Kind)
}

// toolInput is the code: Input, or for a native call, its "code" argument.
func toolInput(a harness.Action) string {
	if a.Input != "" {
		return a.Input
	}
	if s, ok := a.Args["code"].(string); ok {
		return s
	}
	return ""
}

// Grade is the verifier's verdict on an answer action's text (see Step).
func Grade(answer string, references []string) episode.Outcome {
	text := answer
	if !strings.Contains(answer, `\boxed`) && !strings.Contains(answer, `\fbox`) {
		// A bare answer is graded as its own box: wrap it so that Verify,
		// the one grader, reads it, unless its braces do not balance, in
		// which case the box would not close and Equivalent compares it.
		text = `\boxed{` + strings.TrimSpace(answer) + `}`
		if got, ok := Extract(text); !ok || got != strings.TrimSpace(answer) {
			return gradeBare(strings.TrimSpace(answer), references)
		}
	}
	r := Verify(text, references)
	return episode.Outcome{Reward: r.Reward, Correct: r.Correct, Answer: r.Extracted}
}

func gradeBare(answer string, references []string) episode.Outcome {
	out := episode.Outcome{Answer: answer}
	if answer == "" {
		return out
	}
	for _, ref := range references {
		if boxed, ok := Extract(ref); ok {
			ref = boxed
		}
		if Equivalent(answer, ref) {
			out.Reward, out.Correct = 1, true
			break
		}
	}
	return out
}

func (e *Env) run(ctx context.Context, code string) (episode.Step, error) {
	switch {
	case e.runner == nil:
		return episode.Step{ToolError: "no code runner configured"}, nil
	case strings.TrimSpace(code) == "":
		return episode.Step{ToolError: "empty program"}, nil
	case len(code) > maxCodeBytes:
		return episode.Step{ToolError: fmt.Sprintf("program of %d bytes, more than the limit of %d", len(code), maxCodeBytes)}, nil
	}
	res, err := e.runner.Run(ctx, code)
	if err != nil {
		if ctx.Err() != nil {
			return episode.Step{}, fmt.Errorf("math task %q: run code: %w", e.task.ID, err)
		}
		return episode.Step{ToolError: "code run failed: " + err.Error()}, nil
	}
	return episode.Step{ToolResult: CodeResult(res, e.maxOutput)}, nil
}

// CodeResult is the tool result of one run as format_tool_result receives
// it, its output cut to maxChars characters in all (stdout first).
func CodeResult(res RunResult, maxChars int) map[string]any {
	stdout, cutOut := harness.CutChars(res.Stdout, maxChars)
	stderr, cutErr := harness.CutChars(res.Stderr, maxChars-utf8.RuneCountInString(stdout))
	truncated := cutOut || cutErr || res.Truncated

	var text strings.Builder
	text.WriteString(stdout)
	if stderr != "" {
		if stdout != "" && !strings.HasSuffix(stdout, "\n") {
			text.WriteString("\n")
		}
		text.WriteString(stderr)
	}
	if stdout == "" && stderr == "" {
		text.WriteString("(no output)")
	}
	switch res.Status {
	case StatusOK, "":
	case StatusTimeout:
		fmt.Fprintf(&text, "\n[the program ran out of time and was stopped]")
	case StatusOOM:
		fmt.Fprintf(&text, "\n[the program ran out of memory]")
	default:
		fmt.Fprintf(&text, "\n[the program failed with exit code %d]", res.ExitCode)
	}
	if truncated {
		fmt.Fprintf(&text, "\n[output cut to %d characters]", maxChars)
	}
	return map[string]any{
		"stdout":    stdout,
		"stderr":    stderr,
		"status":    res.Status,
		"exit_code": res.ExitCode,
		"truncated": truncated,
		"text":      text.String(),
	}
}

// Final scores an episode that ended without an answer: reward 0.
func (e *Env) Final(context.Context) episode.Outcome { return episode.Outcome{} }
