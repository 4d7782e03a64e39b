package demo

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

// baseline is h0: the bare question, tags-only parsing, no format retry.
//
//go:embed h0.star
var baseline []byte

// Domain is the demo domain for the episode loop.
type Domain struct{}

// NewDomain returns the demo domain.
func NewDomain() *Domain { return &Domain{} }

var _ episode.Domain = (*Domain)(nil)

// Name is "demo".
func (d *Domain) Name() string { return "demo" }

// Contract is the domain's harness contract, Contract().
func (d *Domain) Contract() *harness.Contract { return Contract() }

// Baseline is the source of h0.
func (d *Domain) Baseline() []byte { return append([]byte(nil), baseline...) }

// NewEnv makes the environment of one problem. The harness's constants
// do not change the environment: all of them act in the harness's hooks.
func (d *Domain) NewEnv(_ context.Context, task schemas.Task, _ *harness.Harness) (episode.Env, error) {
	if strings.TrimSpace(task.Question) == "" {
		return nil, fmt.Errorf("demo task %q: empty question", task.ID)
	}
	if len(task.Answers) == 0 {
		return nil, fmt.Errorf("demo task %q: no reference answer", task.ID)
	}
	return &Env{task: task}, nil
}

// Env is one demo episode.
type Env struct {
	task schemas.Task
}

// Reset returns {"question": q}.
func (e *Env) Reset(context.Context) (map[string]any, error) {
	return map[string]any{"question": e.task.Question}, nil
}

// Step grades an answer; any other action is illegal.
func (e *Env) Step(_ context.Context, a harness.Action) (episode.Step, error) {
	switch a.Kind {
	case "answer":
		return episode.Step{Done: true, Outcome: Grade(a.Answer, e.task.Answers)}, nil
	case "tool":
		return episode.Step{Illegal: fmt.Sprintf("there are no tools in the demo (asked for %q): give the answer as <answer>N</answer>", a.Tool)}, nil
	case "move":
		return episode.Step{Illegal: "there are no moves in the demo: give the answer as <answer>N</answer>"}, nil
	}
	return episode.Step{}, fmt.Errorf("demo task %q: step with action kind %q", e.task.ID, a.Kind)
}

// Final scores an episode that ended without an answer: reward 0.
func (e *Env) Final(context.Context) episode.Outcome { return episode.Outcome{} }

// Grade is the verifier: the answer, trimmed, read as a base-10 integer
// (an optional sign, digits only) and compared with each reference read
// the same way. Outcome.Answer is the trimmed text.
func Grade(answer string, references []string) episode.Outcome {
	a := strings.TrimSpace(answer)
	out := episode.Outcome{Answer: a}
	got, ok := parseInt(a)
	if !ok {
		return out
	}
	for _, ref := range references {
		if want, ok := parseInt(strings.TrimSpace(ref)); ok && want == got {
			out.Reward, out.Correct = 1, true
			break
		}
	}
	return out
}

// parseInt accepts what strconv.Atoi does, but not huge values that do
// not fit (no answer here is that large) and nothing else.
func parseInt(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
