package pipeline

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// world is a root with the math datasets imported and a scripted
// OpenAI-compatible model server (modeltest, a fake) that answers each
// question correctly on about half of the seeds: rewards vary, so the
// filter accepts some episodes and rejects others.
type world struct {
	url     string
	store   *storage.Store
	server  *modeltest.Server
	answers map[string]string // question → reference answer
	// delay slows every reply down.
	delay time.Duration
	mu    sync.Mutex
	calls int
}

func newWorld(t *testing.T, url string) *world {
	t.Helper()
	ctx := context.Background()
	s, err := storage.Open(ctx, url, &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := &world{url: url, store: s, answers: map[string]string{}}
	// Generated arithmetic: the pipeline, not the mathematics, is under test.
	var tasks []schemas.Task
	for i := range 16 {
		a, b := 10+7*i, 3+5*i
		q := fmt.Sprintf("What is %d + %d?", a, b)
		tasks = append(tasks, schemas.Task{ID: fmt.Sprintf("sum-%02d", i), Domain: "math", Split: "train",
			Question: q, Answers: []string{fmt.Sprint(a + b)}, Meta: "{}"})
		w.answers[q] = fmt.Sprint(a + b)
	}
	writeDataset(t, s, "math-train", tasks[:8])
	writeDataset(t, s, "math-search", tasks[8:12])
	writeDataset(t, s, "math-test", tasks[12:16])
	w.server = modeltest.NewServer(t, w.reply)
	return w
}

func writeDataset(t *testing.T, s *storage.Store, name string, tasks []schemas.Task) {
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

var seedRE = regexp.MustCompile(`"seed":\s*(-?\d+)`)

// reply answers the first user message's question: right when a hash of
// the question and the request's seed is even.
func (w *world) reply(req *modeltest.Request) modeltest.Reply {
	w.mu.Lock()
	w.calls++
	w.mu.Unlock()
	var question string
	for _, m := range req.Messages {
		if m.Role == "user" {
			question = m.Content
			break
		}
	}
	answer, ok := "", false
	for q, a := range w.answers {
		if strings.Contains(question, q) {
			answer, ok = a, true
			break
		}
	}
	if !ok {
		return modeltest.Reply{Content: "I do not know this one. \\boxed{0}", Delay: w.delay}
	}
	seed := ""
	if m := seedRE.FindSubmatch(req.Raw); m != nil {
		seed = string(m[1])
	}
	h := sha256.Sum256([]byte(question + "/" + seed))
	if h[0]%2 == 0 {
		return modeltest.Reply{Content: fmt.Sprintf("Working it out carefully, the answer is \\boxed{%s}.", answer), Delay: w.delay}
	}
	return modeltest.Reply{Content: "A guess: \\boxed{-1}.", Delay: w.delay}
}

// trainer is a finetune command that writes a real checkpoint file: the
// number of SFT examples it was given.
const trainer = `n=$(wc -l < "$WHALE_SFT_JSONL"); echo "examples $n lr $WHALE_LEARNING_RATE" > "$WHALE_OUTPUT_DIR/model.bin"; echo trained on $n examples`

// experimentSource is an experiment file for the world, with body
// appended to the common part.
func experimentSource(t *testing.T, w *world, name, body string) []byte {
	t.Helper()
	src := fmt.Sprintf(`name: %s
domain: math
data: {train: datasets/math-train, search: datasets/math-search, test: datasets/math-test}
model: {name: fake-model, endpoints: [%q], concurrency: 4}
rsft: {group_size: 2, batch_size: 4}
harness: {proposer: mutate, candidates_per_iteration: 2, search_set_size: 4}
finetune: {command: %q, reload: none}
`, name, w.server.URL, trainer) + body
	if !strings.Contains(body, "eval:") {
		src += "eval: {k: 2}\n"
	}
	return []byte(src)
}

// experiment parses experimentSource.
func (w *world) experiment(t *testing.T, name, body string) *spec.Experiment {
	t.Helper()
	exp, err := spec.Parse(name+".yaml", experimentSource(t, w, name, body))
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

// runner is a Runner of exp on the world, with the real math domain and a
// real model client.
func (w *world) runner(t *testing.T, exp *spec.Experiment) *Runner {
	t.Helper()
	dom, err := registry.Lookup("math", registry.Resources{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := models.New(models.Config{Endpoints: exp.Model.Endpoints, Model: exp.Model.Name, Concurrency: 4,
		Retry: models.RetryPolicy{Attempts: 3, Base: 1e6, Max: 1e7}})
	if err != nil {
		t.Fatal(err)
	}
	return &Runner{
		Planner: Planner{Store: w.store, Run: exp.Name, Spec: exp},
		Runtime: &Runtime{Domain: dom, Model: client},
		Log:     discard,
		Holder:  "test " + t.Name(),
	}
}

func forEachRoot(t *testing.T, fn func(t *testing.T, w *world)) {
	t.Run("file", func(t *testing.T) { fn(t, newWorld(t, "file://"+filepath.ToSlash(t.TempDir()))) })
	t.Run("s3", func(t *testing.T) { fn(t, newWorld(t, s3test.NewBucketURL(t))) })
}
