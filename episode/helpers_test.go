package episode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
)

// fakeContract is the base contract plus the one native tool the fake
// domain runs, search, with a single string argument.
func fakeContract() *harness.Contract {
	return harness.Base().Extend(harness.Contract{
		Name: "fake",
		Tools: []harness.ToolSpec{{Name: "search", Description: "Search the corpus.", Parameters: map[string]any{
			"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string", "maxLength": 100}}, "required": []any{"query"},
		}}},
	})
}

// fakeDomain is a test domain. Its tasks are questions whose answer is
// task.Answers[0]; the environment knows one tool (search) and a tiny
// move game (e2e4 is legal and answered by an observation, win wins).
type fakeDomain struct {
	contract  *harness.Contract
	newEnvErr error
}

func (d *fakeDomain) Name() string                { return "fake" }
func (d *fakeDomain) Contract() *harness.Contract { return d.contract }
func (d *fakeDomain) Baseline() []byte            { return nil }

func (d *fakeDomain) NewEnv(_ context.Context, task schemas.Task, h *harness.Harness) (Env, error) {
	if d.newEnvErr != nil {
		return nil, fmt.Errorf("task %s: %w", task.ID, d.newEnvErr)
	}
	return &fakeEnv{task: task}, nil
}

type fakeEnv struct {
	task  schemas.Task
	steps int
}

func (e *fakeEnv) Reset(context.Context) (map[string]any, error) {
	return map[string]any{"question": e.task.Question}, nil
}

func (e *fakeEnv) Step(ctx context.Context, a harness.Action) (Step, error) {
	e.steps++
	switch a.Kind {
	case "answer":
		ok := len(e.task.Answers) > 0 && a.Answer == e.task.Answers[0]
		r := 0.0
		if ok {
			r = 1
		}
		return Step{Done: true, Outcome: Outcome{Reward: r, Correct: ok, Answer: a.Answer}}, nil
	case "move":
		switch a.Move {
		case "e2e4":
			return Step{Observation: map[string]any{"question": "Black played e7e5. Your move."}}, nil
		case "win":
			return Step{Done: true, Outcome: Outcome{Reward: 1, Correct: true, Answer: "win"}}, nil
		}
		return Step{Illegal: "illegal move " + a.Move}, nil
	case "tool":
		if a.Tool != "search" {
			return Step{Illegal: "unknown tool " + a.Tool}, nil
		}
		switch a.Input {
		case "boom":
			return Step{ToolError: "retriever down"}, nil
		case "crash":
			return Step{}, errors.New("retriever protocol violation")
		case "slow":
			<-ctx.Done()
			return Step{}, ctx.Err()
		case "huge":
			return Step{ToolResult: map[string]any{"text": strings.Repeat("x", 1<<20)}}, nil
		}
		return Step{ToolResult: map[string]any{"text": "result for " + a.Input}}, nil
	}
	return Step{}, fmt.Errorf("unexpected action kind %q", a.Kind)
}

// Final marks its outcome so tests can tell it from a Step's.
func (e *fakeEnv) Final(context.Context) Outcome {
	return Outcome{Reward: 0.25, Answer: fmt.Sprintf("final after %d steps", e.steps)}
}

func loadHarness(t testing.TB, src string) *harness.Harness {
	t.Helper()
	h, err := harness.Load("h.star", []byte(src), harness.Options{Contract: fakeContract()})
	if err != nil {
		t.Fatalf("load harness: %v", err)
	}
	return h
}

func newClient(t testing.TB, url string, timeout time.Duration) *models.Client {
	t.Helper()
	c, err := models.New(models.Config{
		Endpoints: []string{url},
		Model:     "fake-model",
		Timeout:   timeout,
		Retry:     models.RetryPolicy{Attempts: 2, Base: time.Millisecond, Max: 2 * time.Millisecond},
		// Faults of one episode must not bench the endpoint for the others.
		Cooldown: models.CooldownPolicy{Failures: 1 << 20, Duration: time.Millisecond},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("models.New: %v", err)
	}
	return c
}

func task(id, question, answer string) schemas.Task {
	return schemas.Task{ID: id, Domain: "fake", Split: "train", Question: question, Answers: []string{answer}, Meta: `{"rating": 1500, "tags": ["x"]}`}
}

func kinds(tr []schemas.TraceEvent) []string {
	out := make([]string, len(tr))
	for i, ev := range tr {
		out[i] = ev.Kind
	}
	return out
}

func eventsOf(tr []schemas.TraceEvent, kind string) []schemas.TraceEvent {
	var out []schemas.TraceEvent
	for _, ev := range tr {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func roles(msgs []schemas.Message) string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Role
	}
	return strings.Join(out, ",")
}
