package slurmsubmit

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/pipelinetest"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

// world is a file:// root with math datasets, a run frozen in it and a
// scripted model server on loopback (pipelinetest's FAKE model, right on
// about half of the seeds), for jobs that run in other processes (the
// whale binary under Slurm).
type world struct {
	dir, url string
	store    *storage.Store
	server   *modeltest.Server
	*pipelinetest.Model
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{dir: dir, url: "file://" + filepath.ToSlash(dir)}
	s, err := storage.Open(context.Background(), w.url, &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w.store = s
	tasks := pipelinetest.Sums(12)
	w.Model = pipelinetest.NewModel(tasks)
	pipelinetest.WriteDataset(t, s, "math-train", tasks[:8])
	pipelinetest.WriteDataset(t, s, "math-search", tasks[8:10])
	pipelinetest.WriteDataset(t, s, "math-test", tasks[10:12])
	w.server = modeltest.NewServer(t, w.Reply)
	return w
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
