package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline/pipelinetest"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

// world is a root with the math datasets imported and a scripted
// OpenAI-compatible model server (modeltest with pipelinetest's FAKE
// model) that answers each question correctly on about half of the
// seeds: rewards vary, so the filter accepts some episodes and rejects
// others.
type world struct {
	url    string
	store  *storage.Store
	server *modeltest.Server
	*pipelinetest.Model
}

func newWorld(t *testing.T, url string) *world {
	t.Helper()
	s, err := storage.Open(context.Background(), url, &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tasks := pipelinetest.Sums(16)
	w := &world{url: url, store: s, Model: pipelinetest.NewModel(tasks)}
	pipelinetest.WriteDataset(t, s, "math-train", tasks[:8])
	pipelinetest.WriteDataset(t, s, "math-search", tasks[8:12])
	pipelinetest.WriteDataset(t, s, "math-test", tasks[12:16])
	w.server = modeltest.NewServer(t, w.Reply)
	return w
}

// discard is a logger for quiet tests.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

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
