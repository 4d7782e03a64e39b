// Package stagetest holds FAKES and helpers for the tests of the rollout
// and evaluate stages: a fake domain whose verifier compares the answer
// with the task's first answer, a fake model reply policy for modeltest,
// and helpers that import a tasks dataset and read a stage's rollouts.
// Nothing here is used outside tests.
package stagetest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// FakeDomain is a FAKE domain "fake": the first observation is the
// question, an answer ends the episode, and it is correct when it equals
// the task's first answer. It offers one native tool, echo, whose result is
// its text argument; any other action is illegal.
type FakeDomain struct {
	// BaselineSrc replaces the default baseline source when set.
	BaselineSrc string
}

// DefaultBaseline is the fake domain's h0.
const DefaultBaseline = "SYSTEM_PROMPT = \"mode=all\"\nMAX_TURNS = 3\n"

func (FakeDomain) Name() string { return "fake" }

func (FakeDomain) Contract() *harness.Contract {
	return harness.Base().Extend(harness.Contract{Name: "fake", Tools: []harness.ToolSpec{{
		Name: "echo", Description: "Repeats its text.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []any{"text"}},
	}}})
}

func (d FakeDomain) Baseline() []byte {
	if d.BaselineSrc != "" {
		return []byte(d.BaselineSrc)
	}
	return []byte(DefaultBaseline)
}

func (FakeDomain) NewEnv(_ context.Context, t schemas.Task, _ *harness.Harness) (episode.Env, error) {
	if len(t.Answers) == 0 {
		return nil, fmt.Errorf("task %s has no answer", t.ID)
	}
	return &fakeEnv{task: t}, nil
}

type fakeEnv struct{ task schemas.Task }

func (e *fakeEnv) Reset(context.Context) (map[string]any, error) {
	return map[string]any{"question": e.task.Question}, nil
}

func (e *fakeEnv) Step(_ context.Context, a harness.Action) (episode.Step, error) {
	if a.Kind == "tool" && a.Tool == "echo" {
		return episode.Step{ToolResult: a.Input}, nil
	}
	if a.Kind != "answer" {
		return episode.Step{Illegal: "only answers are allowed"}, nil
	}
	ok := strings.TrimSpace(a.Answer) == e.task.Answers[0]
	r := 0.0
	if ok {
		r = 1
	}
	return episode.Step{Done: true, Outcome: episode.Outcome{Reward: r, Correct: ok, Answer: a.Answer}}, nil
}

func (e *fakeEnv) Final(context.Context) episode.Outcome { return episode.Outcome{} }

// Task is the i-th fake task: question "q<i>", answer "a<i>".
func Task(i int) schemas.Task {
	return schemas.Task{ID: fmt.Sprintf("t%03d", i), Domain: "fake", Split: "train",
		Question: fmt.Sprintf("q%d", i), Answers: []string{fmt.Sprintf("a%d", i)}, Meta: "{}"}
}

var questionRE = regexp.MustCompile(`q(\d+)`)

// Policy is a FAKE model for modeltest: it reads the question number i
// and the system prompt's "mode=" of each request and answers
//
//	mode=all   "<answer>a<i></answer>" (always right, one turn)
//	mode=half  right for even i, wrong for odd i
//	mode=most  right unless i%4 == 3
//	mode=slow  first a reply without an answer (a format retry), then right
//	mode=fail  a 500 for every i%5 == 0, else right
//
// Unknown modes answer "<answer>?</answer>".
func Policy(req *modeltest.Request) modeltest.Reply {
	mode, q, assistants := "", -1, 0
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			if _, after, ok := strings.Cut(m.Content, "mode="); ok {
				mode, _, _ = strings.Cut(after, " ")
			}
		case "user":
			if q < 0 {
				if s := questionRE.FindStringSubmatch(m.Content); s != nil {
					q, _ = strconv.Atoi(s[1])
				}
			}
		case "assistant":
			assistants++
		}
	}
	right := modeltest.Reply{Content: fmt.Sprintf("<answer>a%d</answer>", q), PromptTokens: 10, CompletionTokens: 5}
	wrong := modeltest.Reply{Content: "<answer>wrong</answer>", PromptTokens: 10, CompletionTokens: 3}
	switch mode {
	case "all":
		return right
	case "half":
		if q%2 == 0 {
			return right
		}
		return wrong
	case "most":
		if q%4 != 3 {
			return right
		}
		return wrong
	case "slow":
		if assistants == 0 {
			return modeltest.Reply{Content: "let me think", PromptTokens: 10, CompletionTokens: 2}
		}
		return right
	case "fail":
		if q%5 == 0 {
			return modeltest.Reply{Fault: modeltest.FaultServerError}
		}
		return right
	}
	return modeltest.Reply{Content: "<answer>?</answer>"}
}

// Client is a model client on srv that neither retries nor cools the
// endpoint down, so that a fault of the server fails its episode at once
// and the next episode goes on.
func Client(t testing.TB, srv *modeltest.Server, model string, concurrency int) *models.Client {
	t.Helper()
	c, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: model, Concurrency: concurrency,
		Retry: models.RetryPolicy{Attempts: 1}, Cooldown: models.CooldownPolicy{Failures: 1 << 20}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ImportTasks commits dataset name holding tasks, in files of at most
// perFile rows, in order.
func ImportTasks(t testing.TB, s *storage.Store, name string, tasks []schemas.Task, perFile int) *storage.Manifest {
	t.Helper()
	ctx := context.Background()
	dw, prev, err := storage.NewDatasetWriter(ctx, s, name, map[string]any{"n": len(tasks), "first": tasks[0].ID}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if prev != nil {
		return prev
	}
	for lo := 0; lo < len(tasks); lo += perFile {
		hi := min(lo+perFile, len(tasks))
		pw, err := dw.Create(ctx, "tasks", "parquet")
		if err != nil {
			t.Fatal(err)
		}
		w, err := schemas.NewWriter[schemas.Task](pw, schemas.Tasks, schemas.WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(tasks[lo:hi]...); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := pw.Finish(int64(hi - lo)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := dw.Commit(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ReadTable reads every row of table from a committed stage.
func ReadTable[T any](t testing.TB, s *storage.Store, m *storage.Manifest, table string) []T {
	t.Helper()
	ctx := context.Background()
	var rows []T
	for _, f := range m.Table(table) {
		ra, err := m.OpenFile(ctx, s, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.ReadRows(ctx, ra, ra.Size(), func(r T) error { rows = append(rows, r); return nil }); err != nil {
			t.Fatalf("read %s: %v", f.Name, err)
		}
	}
	return rows
}

// FakeChatter is a FAKE in-process model that answers every question
// right at once, for measuring the stage without HTTP.
type FakeChatter struct{ Model string }

// Chat implements episode.Chatter.
func (f FakeChatter) Chat(_ context.Context, req models.Request) (*models.Response, error) {
	q := -1
	for _, m := range req.Messages {
		if m.Role == "user" {
			if s := questionRE.FindStringSubmatch(m.Content); s != nil {
				q, _ = strconv.Atoi(s[1])
				break
			}
		}
	}
	return &models.Response{Content: fmt.Sprintf("<answer>a%d</answer>", q), FinishReason: "stop", Model: f.Model,
		PromptTokens: 10, CompletionTokens: 5}, nil
}
