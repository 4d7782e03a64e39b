package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/stages/internal/stagetest"
	"github.com/whalerun/whale/stages/rollout"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

const (
	model = "e2e-model"
	run   = "e2e"
	// samples is G of the rollout and k of the test evaluation.
	samples = 2
	// The stage seeds; any values do, but the outcomes checked below
	// (some right and some wrong episodes, a variant that differs from
	// h0) depend on them through the seed formula.
	rolloutSeed, searchSeed, testSeed = 11, 12, 13
	// Every reply reports this usage, so tokens are turns × their sum.
	promptTokens, completionTokens = 100, 10
	// marker is what the variant harness adds to a prompt; a request
	// carrying it makes the fake model more careful.
	marker = "Check your work."
)

// A world is one domain as the test and the fake model see it: the tasks
// of its testdata, how to recognise which task a request is about, how the
// model replies when it means to solve the episode or not, and what such an
// episode must end with.
type world struct {
	name  string
	dom   episode.Domain
	tasks []schemas.Task
	// base names the built-in harness the world plays (registry
	// HarnessNames): the tag-based one its fake model writes for. A name
	// other than "h0" is archived and played by its id, as init and the
	// planner do for an experiment's harness.initial.
	base string
	// The variant harness is h0 with anchor replaced by edit: one
	// constant changed, adding marker to a prompt.
	anchor, edit string
	// find names the task a request is about.
	find func(msgs []schemas.Message) (schemas.Task, error)
	// reply is the model's text for a request about task in the episode
	// whose seed is ep; right says whether the model solves the episode.
	reply func(task schemas.Task, msgs []schemas.Message, right bool, ep int64) (string, error)
	// expect is how that episode must end.
	expect func(task schemas.Task, right bool, ep int64) outcome

	mu        sync.Mutex
	surprises []string
}

// outcome is what one episode must end with.
type outcome struct {
	correct bool
	turns   int
	answer  string
}

// draw is a pseudo-random uint64 of (salt, task, seed): the fake model's
// dice, which the test throws again to know what the model did.
func draw(salt, taskID string, seed int64) uint64 {
	sum := sha256.Sum256(fmt.Appendf(nil, "e2e\x00%s\x00%s\x00%d", salt, taskID, seed))
	return binary.BigEndian.Uint64(sum[:8])
}

// solves says whether the fake model solves episode ep of task: about
// half of the episodes under h0, more when the prompt asks for care.
func solves(taskID string, ep int64, careful bool) bool {
	u := float64(draw("solve", taskID, ep)>>11) / (1 << 53)
	if careful {
		return u < 0.8
	}
	return u < 0.5
}

// wantSeed is the documented episode seed (play.Seed), computed here
// independently so that a change of the formula fails the test.
func wantSeed(stage int64, task string, sample int) int64 {
	sum := sha256.Sum256(fmt.Appendf(nil, "whale-seed\x00%d\x00%s\x00%d", stage, task, sample))
	return int64(binary.BigEndian.Uint32(sum[:4]) >> 2)
}

func (w *world) surprise(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.surprises = append(w.surprises, fmt.Sprintf(format, args...))
}

func (w *world) checkSurprises(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.surprises) > 0 {
		t.Fatalf("the fake model met %d requests it did not expect, first: %s", len(w.surprises), w.surprises[0])
	}
}

// handle is the fake model. The episode loop sends the episode's seed plus
// the number of calls made before, and every earlier call left one
// assistant message, so the episode seed is the request's seed minus the
// assistant messages it carries.
func (w *world) handle(req *modeltest.Request) modeltest.Reply {
	fail := func(format string, args ...any) modeltest.Reply {
		w.surprise(format, args...)
		return modeltest.Reply{Fault: modeltest.FaultStatus, Status: 400}
	}
	seed, ok := req.Body["seed"].(float64)
	if !ok {
		return fail("call %d has no seed: %s", req.Call, req.Raw)
	}
	assistants, careful := 0, false
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			assistants++
		}
		if strings.Contains(m.Content, marker) {
			careful = true
		}
	}
	task, err := w.find(req.Messages)
	if err != nil {
		return fail("call %d: %v", req.Call, err)
	}
	ep := int64(seed) - int64(assistants)
	content, err := w.reply(task, req.Messages, solves(task.ID, ep, careful), ep)
	if err != nil {
		return fail("call %d, task %s: %v", req.Call, task.ID, err)
	}
	return modeltest.Reply{Content: content, PromptTokens: promptTokens, CompletionTokens: completionTokens}
}

// split returns the tasks of one split, in dataset order.
func (w *world) split(name string) []schemas.Task {
	var out []schemas.Task
	for _, t := range w.tasks {
		if t.Split == name {
			out = append(out, t)
		}
	}
	return out
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

// playWorld runs w on a file:// root and on a fresh S3 bucket.
func playWorld(t *testing.T, w *world) {
	onEachRoot(t, func(t *testing.T, s *storage.Store) { endToEnd(t, w, s) })
}

// onEachRoot runs f as a subtest on a file:// root and on a fresh S3
// bucket.
func onEachRoot(t *testing.T, f func(t *testing.T, s *storage.Store)) {
	for _, root := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return "file://" + t.TempDir() }},
		{"s3", func(t *testing.T) string { return s3test.NewBucketURL(t) }},
	} {
		t.Run(root.name, func(t *testing.T) {
			start := time.Now()
			f(t, openStore(t, root.url(t)))
			t.Logf("%s on %s: %v", t.Name(), root.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// rowKey names one episode of a stage.
type rowKey struct {
	harness, task string
	sample        int32
}

// wantRow is what one episode's row must hold.
type wantRow struct {
	seed int64
	outcome
}

// expectEpisodes is what the fake model does in every episode of tasks ×
// samples under each harness, from the seed formula and its dice alone.
func (w *world) expectEpisodes(stageSeed int64, tasks []schemas.Task, n int, harnesses map[string]bool) map[rowKey]wantRow {
	out := map[rowKey]wantRow{}
	for id, careful := range harnesses {
		for _, task := range tasks {
			for s := range n {
				seed := wantSeed(stageSeed, task.ID, s)
				out[rowKey{id, task.ID, int32(s)}] = wantRow{seed, w.expect(task, solves(task.ID, seed, careful), seed)}
			}
		}
	}
	return out
}

func endToEnd(t *testing.T, w *world, s *storage.Store) {
	ctx := context.Background()
	tm := stagetest.ImportTasks(t, s, w.name, w.tasks, 4)
	if got := tm.Rows("tasks"); got != int64(len(w.tasks)) {
		t.Fatalf("dataset holds %d tasks, want %d", got, len(w.tasks))
	}
	train, test := w.split("train"), w.split("test")
	if len(train) == 0 || len(test) == 0 {
		t.Fatalf("%d train and %d test tasks; the testdata needs both", len(train), len(test))
	}
	srv := modeltest.NewServer(t, w.handle)
	client := stagetest.Client(t, srv, model, 8)
	inputs := []stages.InputRef{{Name: "tasks", Key: "datasets/" + w.name}}
	// h0 is the content id of the base harness, ref what the stages are
	// given for it and h0name the name a frontier gives it.
	entry, err := registry.Get(w.name)
	if err != nil {
		t.Fatal(err)
	}
	h0src, err := entry.Harness(w.base)
	if err != nil {
		t.Fatal(err)
	}
	h0, ref, h0name := harness.SourceID(h0src), "h0", "h0"
	if w.base != "h0" {
		if ref, err = archive.Put(ctx, s, h0src); err != nil {
			t.Fatal(err)
		}
		h0name = ref[:len("sha256:")+12]
	}

	// Rollout: the train split × G, as two shards.
	ro := &rollout.Stage{Domain: w.dom, Model: client, Concurrency: 4, Log: quiet, Archive: s}
	roCfg := rollout.Config{Domain: w.name, Harness: ref, ModelName: model, Samples: samples, Split: "train"}
	roSpec := func(shard int) stages.Spec {
		return stages.Spec{Run: run, Position: "r001-w01", Inputs: inputs, Config: roCfg, Seed: rolloutSeed, Shards: 2, Shard: shard, Log: quiet}
	}
	var roRes stages.Result
	for shard := range 2 {
		res, err := stages.Execute(ctx, s, roSpec(shard), ro)
		if err != nil {
			t.Fatalf("rollout shard %d: %v", shard, err)
		}
		roRes = res
	}
	w.checkSurprises(t)
	if !roRes.CommittedHere {
		t.Fatalf("the last rollout shard did not commit the stage: %+v", roRes)
	}
	want := w.expectEpisodes(rolloutSeed, train, samples, map[string]bool{h0: false})
	rows := readTable[schemas.Rollout](t, s, roRes.Manifest, "rollouts")
	checkRollouts(t, rows, want, "r001-w01")
	right, turns := 0, 0
	for _, r := range want {
		if r.correct {
			right++
		}
		turns += r.turns
	}
	if right == 0 || right == len(want) {
		t.Fatalf("the fake model solved %d of %d rollout episodes; the test needs some of each", right, len(want))
	}
	sum := roRes.Manifest.Summary
	for k, v := range map[string]float64{"episodes": float64(len(want)), "failed": 0, "correct": float64(right),
		"mean_reward": float64(right) / float64(len(want)), "mean_turns": float64(turns) / float64(len(want)),
		"prompt_tokens": float64(promptTokens * turns), "completion_tokens": float64(completionTokens * turns),
		"tasks": float64(len(train)), "samples": samples} {
		if got, _ := sum[k].(float64); math.Abs(got-v) > 1e-9 {
			t.Errorf("rollout summary %s = %v, want %v", k, sum[k], v)
		}
	}
	if sum["harness_id"] != h0 {
		t.Errorf("rollout summary harness_id = %v, want %s", sum["harness_id"], h0)
	}
	t.Logf("rollout: %d episodes, %d solved, %d turns", len(want), right, turns)
	for shard := range 2 {
		rerun(t, s, srv, roSpec(shard), ro, "rollout shard "+fmt.Sprint(shard))
	}

	// The variant: the base with one prompt constant changed.
	if strings.Contains(string(h0src), marker) || strings.Count(string(h0src), w.anchor) != 1 {
		t.Fatalf("%s of %s holds %q already, or not exactly one %q", w.base, w.name, marker, w.anchor)
	}
	variant, err := archive.Put(ctx, s, []byte(strings.Replace(string(h0src), w.anchor, w.edit, 1)))
	if err != nil {
		t.Fatal(err)
	}

	// Search evaluation: h0 and the variant on the train split, one
	// sample each.
	ev := &evaluate.Stage{Domain: w.dom, Model: client, Concurrency: 4, Log: quiet, Archive: s}
	searchSpec := stages.Spec{Run: run, Position: "r001-h01", Inputs: inputs, Seed: searchSeed, Log: quiet,
		Config: evaluate.Config{Domain: w.name, Harnesses: []string{ref, variant}, ModelName: model, Mode: evaluate.ModeSearch, Split: "train"}}
	sres, err := stages.Execute(ctx, s, searchSpec, ev)
	if err != nil {
		t.Fatalf("search evaluation: %v", err)
	}
	w.checkSurprises(t)
	cands := []string{h0, variant}
	want = w.expectEpisodes(searchSeed, train, 1, map[string]bool{h0: false, variant: true})
	checkRollouts(t, readTable[schemas.Rollout](t, s, sres.Manifest, "rollouts"), want, "r001-h01")
	evals := checkEvals(t, readTable[schemas.Eval](t, s, sres.Manifest, "evals"), want, 1)
	f := decode(t, sres.Manifest)
	winner := checkFrontier(t, f, evals, evaluate.ModeSearch, cands, []string{h0name, variant[:len("sha256:")+12]}, len(train), 1)
	if files := sres.Manifest.Table("frontier"); len(files) != 1 {
		t.Errorf("a one-shard search evaluation committed %d frontier files, want 1", len(files))
	}
	t.Logf("search: %+v", f.Candidates)
	rerun(t, s, srv, searchSpec, ev, "search evaluation")

	// Test evaluation of the winner on the test split, k = 2.
	testSpec := stages.Spec{Run: run, Position: "r001-ht", Inputs: inputs, Seed: testSeed, Log: quiet,
		Config: evaluate.Config{Domain: w.name, Harnesses: []string{winner}, ModelName: model, Mode: evaluate.ModeTest, Samples: samples, Split: "test"}}
	tres, err := stages.Execute(ctx, s, testSpec, ev)
	if err != nil {
		t.Fatalf("test evaluation: %v", err)
	}
	w.checkSurprises(t)
	want = w.expectEpisodes(testSeed, test, samples, map[string]bool{winner: winner == variant})
	checkRollouts(t, readTable[schemas.Rollout](t, s, tres.Manifest, "rollouts"), want, "r001-ht")
	evals = checkEvals(t, readTable[schemas.Eval](t, s, tres.Manifest, "evals"), want, samples)
	name := h0name
	if winner == variant {
		name = variant[:len("sha256:")+12]
	}
	f = decode(t, tres.Manifest)
	checkFrontier(t, f, evals, evaluate.ModeTest, []string{winner}, []string{name}, len(test), samples)
	t.Logf("test: %+v", f.Candidates)
	rerun(t, s, srv, testSpec, ev, "test evaluation")
}

// readTable reads every row of table from a committed stage, the way an
// analysis tool would: the manifest's files, opened with schemas.ReadRows.
func readTable[T any](t *testing.T, s *storage.Store, m *storage.Manifest, table string) []T {
	t.Helper()
	ctx := context.Background()
	var rows []T
	files := m.Table(table)
	if len(files) == 0 {
		t.Fatalf("%s has no %s files", m.Dir, table)
	}
	for _, f := range files {
		ra, err := m.OpenFile(ctx, s, f)
		if err != nil {
			t.Fatal(err)
		}
		n := len(rows)
		if err := schemas.ReadRows(ctx, ra, ra.Size(), func(r T) error { rows = append(rows, r); return nil }); err != nil {
			t.Fatalf("read %s: %v", f.Name, err)
		}
		if int64(len(rows)-n) != f.Rows {
			t.Fatalf("%s holds %d rows; its manifest says %d", f.Name, len(rows)-n, f.Rows)
		}
	}
	return rows
}

// checkRollouts asserts one row per expected episode, none twice, each
// scored as the fake model played it, with its transcript and trace.
func checkRollouts(t *testing.T, rows []schemas.Rollout, want map[rowKey]wantRow, position string) {
	t.Helper()
	if len(rows) != len(want) {
		t.Fatalf("%d rollout rows, want %d", len(rows), len(want))
	}
	seen := map[rowKey]bool{}
	for _, r := range rows {
		k := rowKey{r.HarnessID, r.TaskID, r.Sample}
		if seen[k] {
			t.Fatalf("episode %v has two rows", k)
		}
		seen[k] = true
		wr, ok := want[k]
		if !ok {
			t.Fatalf("row of an episode nobody asked for: %v", k)
		}
		reward := 0.0
		if wr.correct {
			reward = 1
		}
		if r.Run != run || r.Position != position || r.ModelID != model || r.Seed != wr.seed || r.Error != "" ||
			r.FinishReason != episode.FinishAnswer || r.Correct != wr.correct || r.Reward != reward ||
			int(r.Turns) != wr.turns || r.Answer != wr.answer ||
			r.PromptTokens != int64(promptTokens*wr.turns) || r.CompletionTokens != int64(completionTokens*wr.turns) {
			t.Fatalf("episode %v:\n got run %q position %q model %q seed %d error %q finish %q correct %v reward %v turns %d answer %q tokens %d/%d\nwant seed %d correct %v turns %d answer %q",
				k, r.Run, r.Position, r.ModelID, r.Seed, r.Error, r.FinishReason, r.Correct, r.Reward, r.Turns, r.Answer,
				r.PromptTokens, r.CompletionTokens, wr.seed, wr.correct, wr.turns, wr.answer)
		}
		replies := 0
		for _, m := range r.Messages {
			if m.Role == "assistant" {
				replies++
			}
		}
		if replies != wr.turns {
			t.Fatalf("episode %v: %d assistant messages for %d turns: %+v", k, replies, wr.turns, r.Messages)
		}
		kinds := map[string]int{}
		for _, e := range r.Trace {
			kinds[e.Kind]++
		}
		if kinds[episode.KindModel] != wr.turns || kinds[episode.KindHook] == 0 {
			t.Fatalf("episode %v: trace kinds %v, want %d model events and some hook events", k, kinds, wr.turns)
		}
	}
}

type evalKey struct{ harness, task string }

// groupScore is a (harness, task) group's expected score, kept as counts
// so that the frontier can be worked out exactly.
type groupScore struct{ right, turns, n int }

// checkEvals asserts one evals row per (harness, task) with mean@k, pass@k,
// turns and tokens of the expected episodes, and returns those groups.
func checkEvals(t *testing.T, evals []schemas.Eval, want map[rowKey]wantRow, k int) map[evalKey]groupScore {
	t.Helper()
	groups := map[evalKey]groupScore{}
	for key, wr := range want {
		g := groups[evalKey{key.harness, key.task}]
		g.n++
		g.turns += wr.turns
		if wr.correct {
			g.right++
		}
		groups[evalKey{key.harness, key.task}] = g
	}
	if len(evals) != len(groups) {
		t.Fatalf("%d evals rows, want one per (harness, task): %d", len(evals), len(groups))
	}
	seen := map[evalKey]bool{}
	for _, e := range evals {
		key := evalKey{e.HarnessID, e.TaskID}
		g, ok := groups[key]
		if !ok || seen[key] {
			t.Fatalf("evals row %+v is unexpected or repeated", e)
		}
		seen[key] = true
		pass := 0.0
		if g.right > 0 {
			pass = 1
		}
		mean := float64(g.right) / float64(g.n)
		if int(e.K) != k || e.ModelID != model || math.Abs(e.MeanReward-mean) > 1e-12 || e.PassAtK != pass ||
			math.Abs(e.MeanTurns-float64(g.turns)/float64(g.n)) > 1e-12 ||
			math.Abs(e.MeanTokens-float64((promptTokens+completionTokens)*g.turns)/float64(g.n)) > 1e-9 {
			t.Fatalf("evals row %+v, want k %d mean %v pass %v over %d samples with %d turns", e, k, mean, pass, g.n, g.turns)
		}
	}
	return groups
}

func decode(t *testing.T, m *storage.Manifest) *evaluate.Frontier {
	t.Helper()
	f, err := evaluate.DecodeSummary(m.Summary)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// checkFrontier works out each candidate's score, the Pareto frontier
// (success up, mean turns down) and the winner (top success, then fewer
// turns, then earlier) from the expected groups, and compares them with
// the stage's summary. It returns the winner's id.
func checkFrontier(t *testing.T, f *evaluate.Frontier, groups map[evalKey]groupScore, mode string, ids, names []string, tasks, k int) string {
	t.Helper()
	// Every task has k samples, so success and turns compare exactly as
	// sums of per-task means scaled by k: right and turn counts.
	type score struct {
		right, turns, passed int
	}
	sc := make([]score, len(ids))
	for i, id := range ids {
		for key, g := range groups {
			if key.harness == id {
				sc[i].right += g.right
				sc[i].turns += g.turns
				if g.right > 0 {
					sc[i].passed++
				}
			}
		}
	}
	dominates := func(a, b score) bool {
		return a.right >= b.right && a.turns <= b.turns && (a.right > b.right || a.turns < b.turns)
	}
	win := 0
	for i := range sc {
		if sc[i].right > sc[win].right || sc[i].right == sc[win].right && sc[i].turns < sc[win].turns {
			win = i
		}
	}
	if f.Mode != mode || f.K != k || f.Tasks != tasks ||
		f.Episodes != len(ids)*tasks*k || f.Failed != 0 || f.ModelName != model || !slices.Equal(f.ModelIDs, []string{model}) ||
		len(f.Candidates) != len(ids) {
		t.Fatalf("summary %+v, want mode %s, k %d, %d tasks, %d episodes", f, mode, k, tasks, len(ids)*tasks*k)
	}
	per := float64(tasks * k)
	for i, c := range f.Candidates {
		front := true
		for j := range sc {
			if j != i && dominates(sc[j], sc[i]) {
				front = false
			}
		}
		if c.HarnessID != ids[i] || c.Name != names[i] || c.Tasks != tasks || c.Episodes != tasks*k || c.Failed != 0 ||
			math.Abs(c.Success-float64(sc[i].right)/per) > 1e-12 || math.Abs(c.MeanTurns-float64(sc[i].turns)/per) > 1e-12 ||
			math.Abs(c.PassAtK-float64(sc[i].passed)/float64(tasks)) > 1e-12 ||
			math.Abs(c.MeanTokens-float64((promptTokens+completionTokens)*sc[i].turns)/per) > 1e-9 ||
			c.OnFrontier != front || c.Winner != (i == win) {
			t.Errorf("candidate %d: %+v\nwant id %s name %s success %v pass %v turns %v frontier %v winner %v", i, c,
				ids[i], names[i], float64(sc[i].right)/per, float64(sc[i].passed)/float64(tasks), float64(sc[i].turns)/per, front, i == win)
		}
	}
	best := float64(sc[win].right) / per
	if f.Winner != ids[win] || f.WinnerName != names[win] || math.Abs(f.BestScore-best) > 1e-12 ||
		math.Abs(f.WinnerTurns-float64(sc[win].turns)/per) > 1e-12 || f.Perfect != (sc[win].right == tasks*k) {
		t.Errorf("winner %s (%s) best %v turns %v perfect %v; want %s best %v", f.Winner, f.WinnerName, f.BestScore, f.WinnerTurns, f.Perfect, ids[win], best)
	}
	return ids[win]
}

// rerun executes spec again: it must be a no-op that writes nothing and
// calls no model.
func rerun(t *testing.T, s *storage.Store, srv *modeltest.Server, spec stages.Spec, st stages.Stage, what string) {
	t.Helper()
	calls := srv.Calls()
	res, err := stages.Execute(context.Background(), s, spec, st)
	if err != nil {
		t.Fatalf("rerun of the %s: %v", what, err)
	}
	if !res.Skipped || res.Requests.Writes != 0 || srv.Calls() != calls {
		t.Fatalf("rerun of the %s: skipped %v, %d writes, %d model calls; want a no-op", what, res.Skipped, res.Requests.Writes, srv.Calls()-calls)
	}
}
