package slurmsubmit

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

	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// world is a file:// root with math datasets, a run frozen in it and a
// scripted model server on loopback that answers right on about half of
// the seeds — the approach of pipeline's world, for jobs that run in other
// processes (the whale binary under Slurm).
type world struct {
	dir, url string
	store    *storage.Store
	server   *modeltest.Server
	answers  map[string]string

	mu    sync.Mutex
	delay time.Duration
	calls int
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	w := &world{dir: dir, url: "file://" + filepath.ToSlash(dir), answers: map[string]string{}}
	s, err := storage.Open(ctx, w.url, &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w.store = s
	var tasks []schemas.Task
	for i := range 12 {
		a, b := 10+7*i, 3+5*i
		q := fmt.Sprintf("What is %d + %d?", a, b)
		tasks = append(tasks, schemas.Task{ID: fmt.Sprintf("sum-%02d", i), Domain: "math", Split: "train",
			Question: q, Answers: []string{fmt.Sprint(a + b)}, Meta: "{}"})
		w.answers[q] = fmt.Sprint(a + b)
	}
	writeDataset(t, s, "math-train", tasks[:8])
	writeDataset(t, s, "math-search", tasks[8:10])
	writeDataset(t, s, "math-test", tasks[10:12])
	w.server = modeltest.NewServer(t, w.reply)
	return w
}

func (w *world) setDelay(d time.Duration) {
	w.mu.Lock()
	w.delay = d
	w.mu.Unlock()
}

func (w *world) callCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
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

func (w *world) reply(req *modeltest.Request) modeltest.Reply {
	w.mu.Lock()
	w.calls++
	delay := w.delay
	w.mu.Unlock()
	var question string
	for _, m := range req.Messages {
		if m.Role == "user" {
			question = m.Content
			break
		}
	}
	for q, a := range w.answers {
		if !strings.Contains(question, q) {
			continue
		}
		seed := ""
		if m := seedRE.FindSubmatch(req.Raw); m != nil {
			seed = string(m[1])
		}
		if h := sha256.Sum256([]byte(question + "/" + seed)); h[0]%2 == 0 {
			return modeltest.Reply{Content: fmt.Sprintf("The answer is \\boxed{%s}.", a), Delay: delay}
		}
		return modeltest.Reply{Content: "A guess: \\boxed{-1}.", Delay: delay}
	}
	return modeltest.Reply{Content: "\\boxed{0}", Delay: delay}
}

// trainer writes a checkpoint file: the number of SFT examples.
const trainer = `n=$(wc -l < "$WHALE_SFT_JSONL"); echo "examples $n" > "$WHALE_OUTPUT_DIR/model.bin"`

// experiment is a weights-only run of one weight step whose rollout runs
// as shards (2: one per CPU of the test node), frozen into the root.
func (w *world) experiment(t *testing.T, name string, shards int) *spec.Experiment {
	t.Helper()
	src := fmt.Sprintf(`name: %s
domain: math
data: {train: datasets/math-train, search: datasets/math-search, test: datasets/math-test}
model: {name: fake-model, endpoints: [%q], concurrency: 4}
rsft: {group_size: 2, batch_size: 4}
rollout: {shards: %d}
finetune: {command: %q, reload: none}
schedule: weights-only
budget: {weight_steps: 1}
eval: {test_every_phase: false, k: 2}
`, name, w.server.URL, shards, trainer)
	exp, err := spec.Parse(name+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	run, err := spec.Freeze(exp, "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := run.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.store.CreateExclusive(context.Background(), "runs/"+name+"/run.json", data); err != nil {
		t.Fatal(err)
	}
	return &run.Spec
}

func (w *world) planner(exp *spec.Experiment) *pipeline.Planner {
	return &pipeline.Planner{Store: w.store, Run: exp.Name, Spec: exp}
}
