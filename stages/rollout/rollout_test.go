package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/internal/play"
	"github.com/whalerun/whale/stages/internal/stagetest"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func forEachStore(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	t.Run("mem", func(t *testing.T) { fn(t, openStore(t, "mem://")) })
	t.Run("file", func(t *testing.T) { fn(t, openStore(t, "file://"+t.TempDir())) })
	t.Run("s3", func(t *testing.T) { fn(t, openStore(t, s3test.NewBucketURL(t))) })
}

func openStore(t testing.TB, url string) *storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), url, &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tasks(n int) []schemas.Task {
	out := make([]schemas.Task, n)
	for i := range out {
		out[i] = stagetest.Task(i)
	}
	return out
}

const model = "fake-model"

func newStage(t testing.TB, s *storage.Store, srv *modeltest.Server) *Stage {
	return &Stage{Domain: stagetest.FakeDomain{}, Model: stagetest.Client(t, srv, model, 8), Concurrency: 4, Log: quiet, Archive: s}
}

func spec(pos string, cfg Config, seed int64, shards, shard int) stages.Spec {
	return stages.Spec{Run: "exp", Position: pos, Inputs: []stages.InputRef{{Name: "tasks", Key: "datasets/train"}},
		Config: cfg, Seed: seed, Shards: shards, Shard: shard, Log: quiet}
}

type key struct {
	task   string
	sample int32
}

// Two shards each play their share; the second commits the stage with
// exactly tasks × G rows, none twice; a rerun is a no-op.
func TestRolloutShards(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		const n, g = 10, 4
		stagetest.ImportTasks(t, s, "train", tasks(n), 4)
		srv := modeltest.NewServer(t, stagetest.Policy)
		st := newStage(t, s, srv)
		cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: g}

		first, err := stages.Execute(ctx, s, spec("r001-w01", cfg, 7, 2, 0), st)
		if err != nil {
			t.Fatal(err)
		}
		if first.Committed || !slices.Equal(first.Missing, []int{1}) {
			t.Fatalf("after shard 0: committed %v, missing %v", first.Committed, first.Missing)
		}
		res, err := stages.Execute(ctx, s, spec("r001-w01", cfg, 7, 2, 1), st)
		if err != nil {
			t.Fatal(err)
		}
		if !res.CommittedHere {
			t.Fatalf("shard 1 did not commit the stage: %+v", res)
		}
		m := res.Manifest
		if got := m.Rows("rollouts"); got != n*g {
			t.Fatalf("manifest says %d rows, want %d", got, n*g)
		}
		rows := stagetest.ReadTable[schemas.Rollout](t, s, m, "rollouts")
		if len(rows) != n*g {
			t.Fatalf("%d rows, want %d", len(rows), n*g)
		}
		seen := map[key]bool{}
		h0 := harness.SourceID([]byte(stagetest.DefaultBaseline))
		for _, r := range rows {
			k := key{r.TaskID, r.Sample}
			if seen[k] {
				t.Fatalf("row %v twice", k)
			}
			seen[k] = true
			if r.Run != "exp" || r.Position != "r001-w01" || r.HarnessID != h0 || r.ModelID != model || !r.Correct || r.Reward != 1 || r.Turns != 1 || r.Error != "" {
				t.Fatalf("row %+v", r)
			}
			if len(r.Messages) == 0 || len(r.Trace) == 0 {
				t.Fatalf("row %v has no transcript or trace", k)
			}
			// Not told its place, the stage still knows what it computes.
			if r.Stage != Name || r.Section != "weight" || r.Schedule != "" || r.Round != -1 {
				t.Fatalf("row %v: stage %q section %q schedule %q round %d", k, r.Stage, r.Section, r.Schedule, r.Round)
			}
		}
		for i := range n {
			for sm := range g {
				if !seen[key{stagetest.Task(i).ID, int32(sm)}] {
					t.Fatalf("no row for task %d sample %d", i, sm)
				}
			}
		}
		sum := m.Summary
		want := map[string]any{"episodes": float64(n * g), "failed": 0.0, "correct": float64(n * g), "mean_reward": 1.0,
			"mean_turns": 1.0, "harness_id": h0, "tasks": float64(n), "samples": float64(g)}
		for k, v := range want {
			if sum[k] != v {
				t.Errorf("summary %s = %v, want %v", k, sum[k], v)
			}
		}
		if ids, _ := sum["model_ids"].([]any); len(ids) != 1 || ids[0] != model {
			t.Errorf("summary model_ids = %v", sum["model_ids"])
		}
		if sum["prompt_tokens"] != float64(10*n*g) || sum["completion_tokens"] != float64(5*n*g) {
			t.Errorf("summary tokens %v/%v", sum["prompt_tokens"], sum["completion_tokens"])
		}

		calls := srv.Calls()
		for shard := range 2 {
			again, err := stages.Execute(ctx, s, spec("r001-w01", cfg, 7, 2, shard), st)
			if err != nil || !again.Skipped || again.Requests.Writes != 0 {
				t.Fatalf("rerun of shard %d: %+v %v", shard, again, err)
			}
		}
		if srv.Calls() != calls {
			t.Fatalf("rerun called the model %d times", srv.Calls()-calls)
		}
	})
}

// Spec.Place labels every row and is not part of the identity: the same
// rollout without it is the committed stage, and nothing runs again.
func TestRolloutPlace(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	stagetest.ImportTasks(t, s, "train", tasks(3), 3)
	srv := modeltest.NewServer(t, stagetest.Policy)
	cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: 2}
	sp := spec("r004-w03", cfg, 1, 1, 0)
	sp.Place = stages.Place{Schedule: "fst", Round: 4, Section: "weight"}
	res, err := stages.Execute(ctx, s, sp, newStage(t, s, srv))
	if err != nil || !res.Committed {
		t.Fatalf("%+v %v", res, err)
	}
	rows := stagetest.ReadTable[schemas.Rollout](t, s, res.Manifest, "rollouts")
	if len(rows) != 6 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Schedule != "fst" || r.Round != 4 || r.Section != "weight" || r.Stage != "rollout" || r.Position != "r004-w03" {
			t.Fatalf("row %+v", r)
		}
	}
	again, err := stages.Execute(ctx, s, spec("r004-w03", cfg, 1, 1, 0), newStage(t, s, srv))
	if err != nil || !again.Skipped || again.InputDigest != res.InputDigest {
		t.Fatalf("the same rollout without a place: %+v %v (committed %s)", again, err, res.InputDigest)
	}
}

// The window takes Limit tasks from Offset in file order, wrapping, after
// the split filter.
func TestRolloutWindow(t *testing.T) {
	ctx := context.Background()
	ts := tasks(10)
	ts[3].Split, ts[6].Split = "test", "test"
	for _, c := range []struct {
		name          string
		offset, limit int
		split         string
		want          []int
	}{
		{"head", 0, 3, "", []int{0, 1, 2}},
		{"wrap", 8, 4, "", []int{8, 9, 0, 1}},
		{"offset beyond end", 23, 2, "", []int{3, 4}},
		{"all", 5, 0, "", []int{5, 6, 7, 8, 9, 0, 1, 2, 3, 4}},
		{"limit above count", 0, 99, "test", []int{3, 6}},
		// The train split is tasks 0 1 2 4 5 7 8 9: index 7 is task 9.
		{"split wraps", 7, 3, "train", []int{9, 0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t, "mem://")
			stagetest.ImportTasks(t, s, "train", ts, 3)
			srv := modeltest.NewServer(t, stagetest.Policy)
			cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: 1, Offset: c.offset, Limit: c.limit, Split: c.split}
			res, err := stages.Execute(ctx, s, spec("r001-w01", cfg, 1, 1, 0), newStage(t, s, srv))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range stagetest.ReadTable[schemas.Rollout](t, s, res.Manifest, "rollouts") {
				got = append(got, r.TaskID)
			}
			var want []string
			for _, i := range c.want {
				want = append(want, stagetest.Task(i).ID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("window %v, want %v", got, want)
			}
		})
	}
}

// With Shuffle, consecutive windows read each epoch in its own seeded
// order: each task once per epoch, never twice in a window, and what
// play.Window.Indices names; the stored-order digest is unchanged.
func TestRolloutShuffle(t *testing.T) {
	ctx := context.Background()
	const n, limit, steps = 10, 4, 5 // two epochs
	s := openStore(t, "mem://")
	stagetest.ImportTasks(t, s, "train", tasks(n), 3)
	srv := modeltest.NewServer(t, stagetest.Policy)
	seed := int64(11)
	perEpoch := map[int]map[string]int{}
	var all []string
	for step := range steps {
		cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: 1, Offset: step * limit, Limit: limit, Shuffle: &seed}
		res, err := stages.Execute(ctx, s, spec(fmt.Sprintf("r001-w%02d", step+1), cfg, 1, 1, 0), newStage(t, s, srv))
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, r := range stagetest.ReadTable[schemas.Rollout](t, s, res.Manifest, "rollouts") {
			got = append(got, r.TaskID)
		}
		for _, i := range (play.Window{Offset: cfg.Offset, Limit: limit, Shuffle: &seed}).Indices(n) {
			want = append(want, stagetest.Task(i).ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: window %v, want %v", step, got, want)
		}
		for j, id := range got {
			if slices.Contains(got[:j], id) {
				t.Fatalf("step %d: window %v holds %s twice", step, got, id)
			}
			e := (cfg.Offset + j) / n
			if perEpoch[e] == nil {
				perEpoch[e] = map[string]int{}
			}
			perEpoch[e][id]++
		}
		all = append(all, got...)
	}
	for e := range 2 {
		if len(perEpoch[e]) != n {
			t.Fatalf("epoch %d played %d distinct tasks, want %d: %v", e, len(perEpoch[e]), n, perEpoch[e])
		}
	}
	var stored []string
	for i := range 2 * n {
		stored = append(stored, stagetest.Task(i%n).ID)
	}
	if slices.Equal(all, stored) || slices.Equal(all[:n], all[n:]) {
		t.Fatalf("shuffled windows %v: stored order, or the same order twice", all)
	}
	plain := Config{Domain: "fake", Harness: "h0", ModelName: model, Limit: limit}
	b, err := json.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "shuffle") {
		t.Fatalf("unshuffled config %s names shuffle: its digest would change", b)
	}
}

// Episodes whose model calls fail (a 500, no retries) still give one row
// each, with the error.
func TestRolloutFailures(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		const n, g = 10, 3
		stagetest.ImportTasks(t, s, "train", tasks(n), 10)
		id, err := archive.Put(ctx, s, []byte("SYSTEM_PROMPT = \"mode=fail\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		srv := modeltest.NewServer(t, stagetest.Policy)
		cfg := Config{Domain: "fake", Harness: id, ModelName: model, Samples: g}
		res, err := stages.Execute(ctx, s, spec("r001-w01", cfg, 1, 1, 0), newStage(t, s, srv))
		if err != nil {
			t.Fatal(err)
		}
		rows := stagetest.ReadTable[schemas.Rollout](t, s, res.Manifest, "rollouts")
		if len(rows) != n*g {
			t.Fatalf("%d rows, want %d", len(rows), n*g)
		}
		failed := 0
		for _, r := range rows {
			var i int
			fmt.Sscanf(r.TaskID, "t%d", &i)
			bad := i%5 == 0
			if bad {
				failed++
			}
			if bad != (r.Error != "") || bad == r.Correct || r.HarnessID != id {
				t.Fatalf("task %d: row %+v", i, r)
			}
			if bad && (r.FinishReason != "error" || !strings.Contains(r.Error, "500") || r.ModelID != model) {
				t.Fatalf("failed row: reason %q, error %q, model %q", r.FinishReason, r.Error, r.ModelID)
			}
		}
		if res.Manifest.Summary["failed"] != float64(failed) || failed != 2*g {
			t.Fatalf("summary failed %v, counted %d", res.Manifest.Summary["failed"], failed)
		}
	})
}

// wantSeed is the documented formula, computed here independently.
func wantSeed(stage int64, task string, sample int) int64 {
	sum := sha256.Sum256(fmt.Appendf(nil, "whale-seed\x00%d\x00%s\x00%d", stage, task, sample))
	return int64(binary.BigEndian.Uint32(sum[:4]) >> 2)
}

// Seeds follow the formula, do not depend on shards or position, reach
// the model, and change with the stage seed.
func TestRolloutSeeds(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	stagetest.ImportTasks(t, s, "train", tasks(5), 5)
	srv := modeltest.NewServer(t, stagetest.Policy)
	st := newStage(t, s, srv)
	st.Concurrency = 1
	cfg := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: 3}
	seeds := func(pos string, seed int64, shards int) map[key]int64 {
		out := map[key]int64{}
		var m *storage.Manifest
		for shard := range shards {
			res, err := stages.Execute(ctx, s, spec(pos, cfg, seed, shards, shard), st)
			if err != nil {
				t.Fatal(err)
			}
			m = res.Manifest
		}
		for _, r := range stagetest.ReadTable[schemas.Rollout](t, s, m, "rollouts") {
			out[key{r.TaskID, r.Sample}] = r.Seed
		}
		return out
	}
	before := srv.Calls()
	a := seeds("r001-w01", 42, 1)
	sent := map[int64]bool{}
	for _, r := range srv.Requests()[before:] {
		if v, ok := r.Body["seed"].(float64); ok {
			sent[int64(v)] = true
		}
	}
	distinct := map[int64]bool{}
	for k, v := range a {
		if want := wantSeed(42, k.task, int(k.sample)); v != want {
			t.Fatalf("seed of %v = %d, want %d", k, v, want)
		}
		distinct[v] = true
		if !sent[v] {
			t.Fatalf("seed %d of %v never reached the model (sent %v)", v, k, sent)
		}
	}
	if len(distinct) != len(a) {
		t.Fatalf("%d distinct seeds for %d episodes", len(distinct), len(a))
	}
	if b := seeds("r001-w02", 42, 3); !mapsEqual(a, b) {
		t.Fatalf("same stage seed, other position and shards: seeds differ\n%v\n%v", a, b)
	}
	c := seeds("r001-w03", 43, 1)
	same := 0
	for k := range a {
		if a[k] == c[k] {
			same++
		}
	}
	if same > 1 {
		t.Fatalf("another stage seed kept %d of %d seeds", same, len(a))
	}
}

func mapsEqual(a, b map[key]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// What makes the stage fail before any episode runs.
func TestRolloutFailsEarly(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	stagetest.ImportTasks(t, s, "train", tasks(3), 3)
	badID, err := archive.Put(ctx, s, []byte("MAX_TURNS = \"many\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	// A dataset whose "tasks" table holds evals rows.
	dw, _, err := storage.NewDatasetWriter(ctx, s, "wrong", map[string]any{"x": 1}, "test")
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := dw.Create(ctx, "tasks", "parquet")
	w, _ := schemas.NewWriter[schemas.Eval](pw, schemas.Evals, schemas.WriterOptions{})
	w.Write(schemas.Eval{HarnessID: "h"})
	w.Close()
	if _, err := pw.Finish(1); err != nil {
		t.Fatal(err)
	}
	if _, err := dw.Commit(ctx, nil); err != nil {
		t.Fatal(err)
	}
	other := tasks(2)
	other[1].Domain = "chess"
	stagetest.ImportTasks(t, s, "mixed", other, 2)

	srv := modeltest.NewServer(t, stagetest.Policy)
	base := Config{Domain: "fake", Harness: "h0", ModelName: model, Samples: 1}
	for _, c := range []struct {
		name    string
		edit    func(*Config, *stages.Spec)
		wantErr []string
	}{
		{"harness does not load", func(c *Config, _ *stages.Spec) { c.Harness = badID }, []string{"load harness", "MAX_TURNS", "harnesses/"}},
		{"harness not archived", func(c *Config, _ *stages.Spec) { c.Harness = harness.SourceID([]byte("nope")) }, []string{"harnesses/", "not in the archive"}},
		{"harness not an id", func(c *Config, _ *stages.Spec) { c.Harness = "h1" }, []string{`"h1"`, "h0"}},
		{"other domain", func(c *Config, _ *stages.Spec) { c.Domain = "chess" }, []string{`"chess"`, `"fake"`}},
		{"other model", func(c *Config, _ *stages.Spec) { c.ModelName = "other" }, []string{`"other"`, model}},
		{"not a tasks table", func(_ *Config, sp *stages.Spec) { sp.Inputs[0].Key = "datasets/wrong" }, []string{"datasets/wrong/tasks", "evals"}},
		{"task of another domain", func(_ *Config, sp *stages.Spec) { sp.Inputs[0].Key = "datasets/mixed" }, []string{"datasets/mixed/tasks", "row 2", "chess"}},
		{"empty split", func(c *Config, _ *stages.Spec) { c.Split = "dev" }, []string{`split "dev"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			sp := spec("r001-w01", cfg, 1, 1, 0)
			c.edit(&cfg, &sp)
			sp.Config = cfg
			sp.Force = true
			calls := srv.Calls()
			_, err := stages.Execute(ctx, s, sp, newStage(t, s, srv))
			if err == nil {
				t.Fatal("the stage ran")
			}
			t.Log(err)
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if srv.Calls() != calls {
				t.Fatal("episodes ran before the stage failed")
			}
		})
	}
	if _, err := stages.Execute(ctx, s, spec("r001-w09", base, 1, 1, 0), &Stage{Domain: stagetest.FakeDomain{}, Model: stagetest.Client(t, srv, model, 1), Log: quiet}); err != nil {
		t.Fatalf("h0 without an archive: %v", err)
	}
}

func TestMergeSummaries(t *testing.T) {
	parts := []map[string]any{
		{"episodes": 4.0, "failed": 1.0, "correct": 2.0, "mean_reward": 0.5, "mean_turns": 1.0, "prompt_tokens": 40.0, "completion_tokens": 8.0,
			"model_ids": []any{"b"}, "harness_id": "sha256:x", "tasks": 3.0, "samples": 2.0},
		{"episodes": 2.0, "failed": 0.0, "correct": 2.0, "mean_reward": 1.0, "mean_turns": 4.0, "prompt_tokens": 20.0, "completion_tokens": 4.0,
			"model_ids": []any{"a", "b"}, "harness_id": "sha256:x", "tasks": 3.0, "samples": 2.0},
		{"episodes": 0.0, "failed": 0.0, "correct": 0.0, "mean_reward": 0.0, "mean_turns": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0,
			"model_ids": []any{}, "harness_id": "sha256:x", "tasks": 3.0, "samples": 2.0},
	}
	got, err := (&Stage{}).MergeSummaries(parts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"episodes": 6.0, "failed": 1.0, "correct": 4.0, "mean_reward": 2.0 / 3, "mean_turns": 2.0,
		"prompt_tokens": 60.0, "completion_tokens": 12.0, "harness_id": "sha256:x", "tasks": 3.0, "samples": 2.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if ids := got["model_ids"].([]string); !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("model_ids %v", ids)
	}
	parts[1]["harness_id"] = "sha256:y"
	if _, err := (&Stage{}).MergeSummaries(parts); err == nil {
		t.Error("shards of two harnesses merged")
	}
}
