package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/pipelinetest"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// checkpoint is the demo domain's committed starting model.
func checkpoint(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	p, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "domains", "demo", "testdata", "pretrained.wlm"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// demoData commits small demo splits as datasets/demo-{train,search,test}.
func demoData(t testing.TB, s *storage.Store) {
	t.Helper()
	for _, sp := range []struct {
		split string
		n     int
	}{{demo.SplitTrain, 64}, {demo.SplitSearch, 10}, {demo.SplitTest, 12}} {
		tasks, err := demo.Tasks(7, sp.n, sp.split)
		if err != nil {
			t.Fatal(err)
		}
		pipelinetest.WriteDataset(t, s, "demo-"+sp.split, tasks)
	}
}

// demoSpec is a small demo experiment: a few seconds with the local model.
// body is appended and may set schedule, switch, budget and eval.
func demoSpec(t testing.TB, name, body string) *spec.Experiment {
	t.Helper()
	src := fmt.Sprintf(`name: %s
domain: demo
data: {train: datasets/demo-train, search: datasets/demo-search, test: datasets/demo-test}
model: {name: demo-local, checkpoint: %q, temperature: 1.0, top_k: 20, max_tokens: 48, concurrency: 16}
rsft: {group_size: 2, batch_size: 16, threshold: 0.5, learning_rate: 1.0e-3}
harness: {initial: h0, candidates_per_iteration: 3, search_set_size: 10, proposer: mutate}
`, name, checkpoint(t)) + body
	if !strings.Contains(body, "eval:") {
		src += "eval: {k: 2, test_every_phase: true}\n"
	}
	if !strings.Contains(body, "budget:") {
		src += "budget: {rollouts: 1000}\n"
	}
	exp, err := spec.Parse(name+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

// initRun freezes exp into runs/<name>/run.json, as whale init does.
func initRun(t testing.TB, s *storage.Store, exp *spec.Experiment) *spec.Experiment {
	t.Helper()
	run, err := spec.Freeze(exp, "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := run.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAll(context.Background(), "runs/"+exp.Name+"/run.json", data); err != nil {
		t.Fatal(err)
	}
	return &run.Spec
}

// runDemo initialises exp in s and runs it: to its end with steps < 0,
// else for that many stages (a run in progress).
func runDemo(t testing.TB, s *storage.Store, exp *spec.Experiment, steps int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	frozen := initRun(t, s, exp)
	rt, err := pipeline.NewRuntime(ctx, s, frozen, pipeline.RuntimeOptions{Log: quiet, Run: exp.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	r := &pipeline.Runner{Planner: pipeline.Planner{Store: s, Run: exp.Name, Spec: frozen}, Runtime: rt, Log: quiet,
		Out: io.Discard, Holder: "report test"}
	if steps < 0 {
		if err := r.RunToEnd(ctx, nil); err != nil {
			t.Fatalf("run %s: %v", exp.Name, err)
		}
		return
	}
	for range steps {
		if _, err := r.Step(ctx); err != nil {
			t.Fatalf("run %s: %v", exp.Name, err)
		}
	}
}

// The demo runs every test of the package shares: built once (a few
// seconds each) in one file:// bucket.
var (
	demoOnce  sync.Once
	demoRoot  string
	demoDir   string
	demoErr   error
	demoNames = []string{"demo-whale", "demo-weights", "demo-harness", "demo-partial"}
	// seedGroups compares the demo runs over seeds.
	seedGroups = []GroupSpec{
		{Name: "whale", Runs: []string{"demo-whale", "demo-whale-s2"}},
		{Name: "weights", Runs: []string{"demo-weights", "demo-weights-s2"}},
		{Name: "harness", Runs: []string{"demo-harness"}},
	}
)

// demoBucket returns the URL of a bucket holding four real demo runs: a
// whale run (fixed switch), a weights-only run, a harness-only run and a
// whale run stopped in its second weight step; and the first two again
// with seed 2 (demo-whale-s2, demo-weights-s2), for seedGroups.
func demoBucket(t *testing.T) string {
	t.Helper()
	demoOnce.Do(func() {
		rec := &recorder{}
		defer func() {
			if p := recover(); p != nil && p != errAbort {
				panic(p)
			}
			demoErr = rec.err
		}()
		dir, err := os.MkdirTemp("", "whale-report-test-")
		if err != nil {
			rec.err = err
			return
		}
		demoDir = dir
		demoRoot = "file://" + filepath.ToSlash(dir)
		s, err := storage.Open(context.Background(), demoRoot, nil)
		if err != nil {
			demoErr = err
			return
		}
		defer s.Close()
		demoData(rec, s)
		runDemo(rec, s, demoSpec(rec, "demo-whale", `schedule: whale
switch: {mode: fixed, fixed: {epochs: 0.5, iterations: 3}}
budget: {rollouts: 300}
`), -1)
		runDemo(rec, s, demoSpec(rec, "demo-weights", "schedule: weights-only\nswitch: {mode: fixed, fixed: {epochs: 0.5}}\nbudget: {rollouts: 200}\n"), -1)
		runDemo(rec, s, demoSpec(rec, "demo-harness", "schedule: harness-only\nbudget: {rollouts: 200, harness_iterations: 4}\n"), -1)
		runDemo(rec, s, demoSpec(rec, "demo-partial", "schedule: whale\nswitch: {mode: fixed, fixed: {epochs: 0.5, iterations: 2}}\nbudget: {rollouts: 300}\n"), 5)
		// Second seeds of two schedules, for the comparison over seeds.
		runDemo(rec, s, demoSpec(rec, "demo-whale-s2", `schedule: whale
switch: {mode: fixed, fixed: {epochs: 0.5, iterations: 3}}
budget: {rollouts: 300}
seed: 2
`), -1)
		runDemo(rec, s, demoSpec(rec, "demo-weights-s2", "schedule: weights-only\nswitch: {mode: fixed, fixed: {epochs: 0.5}}\nbudget: {rollouts: 200}\nseed: 2\n"), -1)
	})
	if demoErr != nil {
		t.Fatalf("building the demo runs: %v", demoErr)
	}
	return demoRoot
}

func TestMain(m *testing.M) {
	code := m.Run()
	if demoDir != "" {
		os.RemoveAll(demoDir)
	}
	os.Exit(code)
}

// errAbort unwinds a recorder's Fatal.
var errAbort = errors.New("abort")

// recorder is a testing.TB for work shared by several tests (built once
// outside any one test): Fatal records the error and unwinds to the
// caller's recover. Only the methods the helpers call are implemented.
type recorder struct {
	testing.TB
	err error
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) {
	r.err = errors.New(fmt.Sprint(args...))
	panic(errAbort)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.err = fmt.Errorf(format, args...)
	panic(errAbort)
}
