package evaluate

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/internal/stagetest"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const model = "fake-model"

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

// fakePropose is a FAKE propose stage: it commits the candidates table it
// is given.
type fakePropose struct{ rows []schemas.Candidate }

func (*fakePropose) Name() string { return "propose" }

func (p *fakePropose) Run(ctx context.Context, x *stages.Exec) error {
	pw, err := x.Create(ctx, "candidates.parquet")
	if err != nil {
		return err
	}
	w, err := schemas.NewWriter[schemas.Candidate](pw, schemas.Candidates, schemas.WriterOptions{})
	if err != nil {
		return err
	}
	if err := w.Write(p.rows...); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	_, err = pw.Finish(int64(len(p.rows)))
	return err
}

func cand(name, src string) schemas.Candidate {
	return schemas.Candidate{HarnessID: harness.SourceID([]byte(src)), Name: name, Source: src, Proposer: "test"}
}

func propose(t *testing.T, s *storage.Store, pos string, rows ...schemas.Candidate) {
	t.Helper()
	sp := stages.Spec{Run: "exp", Position: pos, Config: map[string]any{"n": len(rows)}, Log: quiet}
	if _, err := stages.Execute(context.Background(), s, sp, &fakePropose{rows: rows}); err != nil {
		t.Fatal(err)
	}
}

func newStage(t testing.TB, s *storage.Store, srv *modeltest.Server) *Stage {
	return &Stage{Domain: stagetest.FakeDomain{}, Model: stagetest.Client(t, srv, model, 8), Concurrency: 4, Log: quiet, Archive: s}
}

func spec(pos string, cfg Config, shards, shard int, inputs ...stages.InputRef) stages.Spec {
	return stages.Spec{Run: "exp", Position: pos, Inputs: append([]stages.InputRef{{Name: "tasks", Key: "datasets/search"}}, inputs...),
		Config: cfg, Seed: 3, Shards: shards, Shard: shard, Log: quiet}
}

// Three candidates on 8 search tasks, one sample each, through the fake
// model's policy (see stagetest.Policy):
//
//	most: wrong on tasks 3 and 7 → success 6/8, 1 turn
//	half: wrong on odd tasks     → success 4/8, 1 turn
//	slow: a format retry, right  → success 1,   2 turns
//
// The frontier is {slow, most} (half is dominated by most); the winner is
// slow, the top success; slow is perfect.
func TestEvaluateCandidates(t *testing.T) {
	most, half, slow := cand("most", `SYSTEM_PROMPT = "mode=most"`), cand("half", `SYSTEM_PROMPT = "mode=half"`), cand("slow", `SYSTEM_PROMPT = "mode=slow"`)
	half.ParentID = most.HarnessID
	want := map[string]struct {
		success, turns float64
		frontier       bool
		wrong          func(i int) bool
	}{
		most.HarnessID: {0.75, 1, true, func(i int) bool { return i%4 == 3 }},
		half.HarnessID: {0.5, 1, false, func(i int) bool { return i%2 == 1 }},
		slow.HarnessID: {1, 2, true, func(int) bool { return false }},
	}
	const n = 8
	check := func(t *testing.T, s *storage.Store, m *storage.Manifest, shards int) {
		rows := stagetest.ReadTable[schemas.Rollout](t, s, m, "rollouts")
		if len(rows) != 3*n {
			t.Fatalf("%d rollouts, want %d", len(rows), 3*n)
		}
		for _, r := range rows {
			if r.Stage != Name || r.Section != "harness" {
				t.Fatalf("a search evaluation's row says stage %q section %q", r.Stage, r.Section)
			}
		}
		evals := stagetest.ReadTable[schemas.Eval](t, s, m, "evals")
		if len(evals) != 3*n {
			t.Fatalf("%d evals, want %d", len(evals), 3*n)
		}
		for _, e := range evals {
			w, ok := want[e.HarnessID]
			if !ok {
				t.Fatalf("eval of unknown harness %s", e.HarnessID)
			}
			var i int
			for j := range n {
				if stagetest.Task(j).ID == e.TaskID {
					i = j
				}
			}
			r := 1.0
			if w.wrong(i) {
				r = 0
			}
			if e.K != 1 || e.MeanReward != r || e.PassAtK != r || e.MeanTurns != w.turns || e.ModelID != model || e.MeanTokens <= 0 {
				t.Fatalf("eval %+v, want reward %v, turns %v", e, r, w.turns)
			}
		}
		f, err := DecodeSummary(m.Summary)
		if err != nil {
			t.Fatal(err)
		}
		if f.Winner != slow.HarnessID || f.WinnerName != "slow" || f.WinnerTurns != 2 || f.BestScore != 1 || !f.Perfect ||
			f.Tasks != n || f.Episodes != 3*n || f.Failed != 0 || f.K != 1 || f.Mode != ModeSearch {
			t.Fatalf("summary %+v", f)
		}
		var order []string
		for _, c := range f.Candidates {
			order = append(order, c.Name)
			w := want[c.HarnessID]
			if c.Success != w.success || c.MeanTurns != w.turns || c.OnFrontier != w.frontier || c.Tasks != n ||
				c.Episodes != n || c.PassAtK != w.success || c.Winner != (c.Name == "slow") {
				t.Errorf("candidate %s: %+v, want success %v turns %v frontier %v", c.Name, c, w.success, w.turns, w.frontier)
			}
		}
		if !slices.Equal(order, []string{"most", "half", "slow"}) || f.Candidates[1].ParentID != most.HarnessID {
			t.Fatalf("candidates %v, parent %q", order, f.Candidates[1].ParentID)
		}
		files := m.Table("frontier")
		if shards > 1 {
			if len(files) != 0 {
				t.Fatal("a sharded evaluation wrote frontier.json")
			}
			return
		}
		if len(files) != 1 {
			t.Fatalf("%d frontier files", len(files))
		}
		r, err := m.NewFileReader(context.Background(), s, files[0])
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var ff Frontier
		if err := json.NewDecoder(r).Decode(&ff); err != nil {
			t.Fatal(err)
		}
		if ff.Winner != f.Winner || len(ff.Candidates) != 3 || ff.Candidates[0] != f.Candidates[0] {
			t.Fatalf("frontier.json %+v differs from the summary %+v", ff, f)
		}
	}
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		stagetest.ImportTasks(t, s, "search", tasks(n), 3)
		propose(t, s, "r001-h02", most, half, slow)
		srv := modeltest.NewServer(t, stagetest.Policy)
		cands := stages.InputRef{Name: "candidates", Position: "r001-h02", Stage: "propose"}
		cfg := Config{Domain: "fake", ModelName: model, Mode: ModeSearch}
		res, err := stages.Execute(ctx, s, spec("r001-h02", cfg, 1, 0, cands), newStage(t, s, srv))
		if err != nil {
			t.Fatal(err)
		}
		check(t, s, res.Manifest, 1)
		// The candidates are in the archive now: a rollout can run the winner.
		if src, err := archive.Get(ctx, s, slow.HarnessID); err != nil || string(src) != slow.Source {
			t.Fatalf("winner not archived: %v", err)
		}
		calls := srv.Calls()
		if again, err := stages.Execute(ctx, s, spec("r001-h02", cfg, 1, 0, cands), newStage(t, s, srv)); err != nil || !again.Skipped || srv.Calls() != calls {
			t.Fatalf("rerun: %+v %v", again, err)
		}

		// The same evaluation as three shards (one shard gets 2 tasks):
		// evals are final per shard, the frontier is merged at commit.
		// Each shard is told the schedule and round; the section is the
		// stage's own.
		var m *storage.Manifest
		for shard := range 3 {
			sp := spec("r001-h03", cfg, 3, shard, cands)
			sp.Place = stages.Place{Schedule: "whale", Round: 1}
			res, err := stages.Execute(ctx, s, sp, newStage(t, s, srv))
			if err != nil {
				t.Fatal(err)
			}
			m = res.Manifest
		}
		check(t, s, m, 3)
		for _, r := range stagetest.ReadTable[schemas.Rollout](t, s, m, "rollouts") {
			if r.Schedule != "whale" || r.Round != 1 {
				t.Fatalf("row says schedule %q round %d", r.Schedule, r.Round)
			}
		}
	})
}

// A test evaluation of config harnesses: k = 8 by default, pass@8 and
// mean@8, failed episodes counted. The failing harness makes no turn on
// task 0 (its calls fail), so its mean turns are 0.8 against h0's 1: both
// are on the frontier, and h0 wins on success.
func TestEvaluateTestMode(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	const n = 5
	stagetest.ImportTasks(t, s, "search", tasks(n), n)
	failID, err := archive.Put(ctx, s, []byte(`SYSTEM_PROMPT = "mode=fail"`))
	if err != nil {
		t.Fatal(err)
	}
	srv := modeltest.NewServer(t, stagetest.Policy)
	cfg := Config{Domain: "fake", ModelName: model, Mode: ModeTest, Harnesses: []string{"h0", failID}}
	res, err := stages.Execute(ctx, s, spec("r001-t", cfg, 1, 0), newStage(t, s, srv))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if got := m.Rows("rollouts"); got != 2*n*8 {
		t.Fatalf("%d rollouts, want %d", got, 2*n*8)
	}
	for _, r := range stagetest.ReadTable[schemas.Rollout](t, s, m, "rollouts") {
		if r.Stage != Name || r.Section != "test" || r.Schedule != "" || r.Round != -1 {
			t.Fatalf("a test evaluation's row says stage %q section %q schedule %q round %d", r.Stage, r.Section, r.Schedule, r.Round)
		}
	}
	h0 := harness.SourceID([]byte(stagetest.DefaultBaseline))
	for _, e := range stagetest.ReadTable[schemas.Eval](t, s, m, "evals") {
		want := 1.0
		if e.HarnessID == failID && e.TaskID == stagetest.Task(0).ID {
			want = 0 // task 0 is 0 mod 5: every call fails
		}
		if e.K != 8 || e.MeanReward != want || e.PassAtK != want {
			t.Fatalf("eval %+v, want k 8 and %v", e, want)
		}
	}
	f, err := DecodeSummary(m.Summary)
	if err != nil {
		t.Fatal(err)
	}
	if f.K != 8 || f.Winner != h0 || f.Candidates[0].Name != "h0" || f.Failed != 8 || f.Candidates[1].Failed != 8 ||
		math.Abs(f.Candidates[1].Success-0.8) > 1e-12 || math.Abs(f.Candidates[1].MeanTurns-0.8) > 1e-12 ||
		!f.Candidates[0].OnFrontier || !f.Candidates[1].OnFrontier {
		t.Fatalf("summary %+v", f)
	}
}

func TestEvaluateFailsEarly(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	stagetest.ImportTasks(t, s, "search", tasks(2), 2)
	lying := cand("liar", `MAX_TURNS = 2`)
	lying.Source = `MAX_TURNS = 3`
	propose(t, s, "r001-h02", lying)
	a := cand("a", `MAX_TURNS = 2`)
	propose(t, s, "r001-h03", a, a)
	propose(t, s, "r001-h04", cand("bad", `MAX_TURNS = 0`))
	srv := modeltest.NewServer(t, stagetest.Policy)
	in := func(pos string) stages.InputRef {
		return stages.InputRef{Name: "candidates", Position: pos, Stage: "propose"}
	}
	base := Config{Domain: "fake", ModelName: model, Mode: ModeSearch}
	for _, c := range []struct {
		name    string
		cfg     func(Config) Config
		inputs  []stages.InputRef
		wantErr []string
	}{
		{"source does not hash to id", nil, []stages.InputRef{in("r001-h02")}, []string{"row 1", "liar", "hashes to", "candidates-"}},
		{"candidate twice", nil, []stages.InputRef{in("r001-h03")}, []string{"listed twice", "row 2"}},
		{"candidate does not load", nil, []stages.InputRef{in("r001-h04")}, []string{"row 1", "MAX_TURNS"}},
		{"both inputs and harnesses", func(c Config) Config { c.Harnesses = []string{"h0"}; return c }, []stages.InputRef{in("r001-h03")}, []string{"exclude"}},
		{"nothing to evaluate", nil, nil, []string{"nothing to evaluate"}},
		{"bad mode", func(c Config) Config { c.Mode = "final"; c.Harnesses = []string{"h0"}; return c }, nil, []string{`"final"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			if c.cfg != nil {
				cfg = c.cfg(cfg)
			}
			sp := spec("r001-h09", cfg, 1, 0, c.inputs...)
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
}

// Merging weighs each shard's scores by its tasks and recomputes the
// frontier and the winner over the whole.
func TestMergeSummaries(t *testing.T) {
	part := func(tasks int, a, b Score) map[string]any {
		f := &Frontier{Mode: ModeSearch, K: 1, Tasks: tasks, Episodes: 2 * tasks, ModelIDs: []string{model}, Candidates: []Score{a, b}}
		f.mark()
		return f.summary()
	}
	// Shard 0 alone would crown b (1.0 on its one task); over all four
	// tasks a has 0.75 against b's 0.25 + ... = (1 + 0)/4.
	p0 := part(1, Score{HarnessID: "a", Name: "a", Tasks: 1, Episodes: 1, Success: 0, MeanTurns: 1},
		Score{HarnessID: "b", Name: "b", Tasks: 1, Episodes: 1, Success: 1, MeanTurns: 3})
	p1 := part(3, Score{HarnessID: "a", Name: "a", Tasks: 3, Episodes: 3, Success: 1, MeanTurns: 1, Failed: 1},
		Score{HarnessID: "b", Name: "b", Tasks: 3, Episodes: 3, Success: 1.0 / 3, MeanTurns: 1})
	if w, _ := DecodeSummary(p0); w.Winner != "b" {
		t.Fatalf("shard 0's own winner %s", w.Winner)
	}
	got, err := (&Stage{}).MergeSummaries([]map[string]any{p0, p1})
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeSummary(got)
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Candidates[0], f.Candidates[1]
	if f.Tasks != 4 || f.Winner != "a" || f.BestScore != 0.75 || f.Perfect || a.Success != 0.75 || a.Failed != 1 ||
		math.Abs(b.Success-0.5) > 1e-12 || b.MeanTurns != 1.5 || !a.OnFrontier || b.OnFrontier {
		t.Fatalf("merged %+v", f)
	}
	p1["candidates"].([]any)[0].(map[string]any)["harness_id"] = "c"
	if _, err := (&Stage{}).MergeSummaries([]map[string]any{p0, p1}); err == nil {
		t.Fatal("shards with other candidates merged")
	}
}

// A propose stage that found no valid candidate leaves an empty table:
// the evaluation commits with nothing scored and no model call.
func TestEvaluateNoCandidates(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		stagetest.ImportTasks(t, s, "search", tasks(2), 2)
		propose(t, s, "r001-h02")
		srv := modeltest.NewServer(t, stagetest.Policy)
		sp := spec("r001-h02", Config{Domain: "fake", ModelName: model, Mode: ModeSearch}, 1, 0,
			stages.InputRef{Name: "candidates", Position: "r001-h02", Stage: "propose"})
		res, err := stages.Execute(ctx, s, sp, newStage(t, s, srv))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Committed || srv.Calls() != 0 {
			t.Fatalf("committed %v after %d model calls; want a commit and none", res.Committed, srv.Calls())
		}
		f, err := DecodeSummary(res.Manifest.Summary)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Candidates) != 0 || f.Winner != "" || f.Episodes != 0 || f.Perfect {
			t.Errorf("summary %+v, want nothing scored", f)
		}
		for _, table := range []string{"rollouts", "evals"} {
			var rows int64
			for _, fe := range res.Manifest.Table(table) {
				rows += fe.Rows
			}
			if rows != 0 {
				t.Errorf("%s has %d rows, want 0", table, rows)
			}
		}
	})
}
