// Package pipelinetest holds what the tests of the pipeline and of its
// scale-out share: generated math tasks, a way to commit them as a
// dataset, and a FAKE model policy for models/modeltest that answers
// right on about half of the seeds, so that rewards vary and the filter
// has something to accept and to reject. It is for tests only.
package pipelinetest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// Sums returns n generated arithmetic tasks of the math domain, split
// train: the pipeline, not the mathematics, is under test.
func Sums(n int) []schemas.Task {
	out := make([]schemas.Task, n)
	for i := range out {
		a, b := 10+7*i, 3+5*i
		out[i] = schemas.Task{ID: fmt.Sprintf("sum-%02d", i), Domain: "math", Split: "train",
			Question: fmt.Sprintf("What is %d + %d?", a, b), Answers: []string{fmt.Sprint(a + b)}, Meta: "{}"}
	}
	return out
}

// WriteDataset commits tasks as dataset name in s (nothing to do when it
// is committed already).
func WriteDataset(t testing.TB, s *storage.Store, name string, tasks []schemas.Task) {
	t.Helper()
	ctx := context.Background()
	dw, m, err := storage.NewDatasetWriter(ctx, s, name, map[string]any{"test": name, "n": len(tasks)}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if m != nil {
		return
	}
	pw, err := dw.Create(ctx, "tasks", "parquet")
	if err != nil {
		t.Fatal(err)
	}
	tw, err := schemas.NewWriter[schemas.Task](pw, schemas.Tasks, schemas.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Write(tasks...); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	pw.SetRows(int64(len(tasks)))
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dw.Commit(ctx, map[string]any{"tasks": len(tasks)}); err != nil {
		t.Fatal(err)
	}
}

// Model is a FAKE model: it answers the first user message's question,
// right when a hash of the question and the request's seed is even.
type Model struct {
	answers map[string]string // question → reference answer

	mu    sync.Mutex
	delay time.Duration
	calls int
}

// NewModel knows the answers of tasks.
func NewModel(tasks []schemas.Task) *Model {
	m := &Model{answers: make(map[string]string, len(tasks))}
	for _, t := range tasks {
		m.answers[t.Question] = t.Answers[0]
	}
	return m
}

// SetDelay slows every later reply down.
func (m *Model) SetDelay(d time.Duration) {
	m.mu.Lock()
	m.delay = d
	m.mu.Unlock()
}

// Calls counts the requests answered so far.
func (m *Model) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

var seedRE = regexp.MustCompile(`"seed":\s*(-?\d+)`)

// Reply is a modeltest.Handler.
func (m *Model) Reply(req *modeltest.Request) modeltest.Reply {
	m.mu.Lock()
	m.calls++
	delay := m.delay
	m.mu.Unlock()
	var question string
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			question = msg.Content
			break
		}
	}
	for q, a := range m.answers {
		if !strings.Contains(question, q) {
			continue
		}
		seed := ""
		if s := seedRE.FindSubmatch(req.Raw); s != nil {
			seed = string(s[1])
		}
		// The coin is the task's question and the seed, not the whole
		// message, so that a harness's prompt around the question (the
		// paper's math h0 adds an answer-format line) leaves it as it was.
		if h := sha256.Sum256([]byte(q + "/" + seed)); h[0]%2 == 0 {
			return modeltest.Reply{Content: fmt.Sprintf("Working it out carefully, the answer is \\boxed{%s}.", a), Delay: delay}
		}
		return modeltest.Reply{Content: "A guess: \\boxed{-1}.", Delay: delay}
	}
	return modeltest.Reply{Content: "I do not know this one. \\boxed{0}", Delay: delay}
}
