package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// fixedRollouts is a stage that commits the rollouts it is given, under
// the name of a rollout or evaluate stage.
type fixedRollouts struct {
	name string
	rows []schemas.Rollout
}

func (s fixedRollouts) Name() string { return s.name }

func (s fixedRollouts) Run(ctx context.Context, x *stages.Exec) error {
	pw, err := x.Create(ctx, "rollouts.parquet")
	if err != nil {
		return err
	}
	w, err := schemas.NewWriter[schemas.Rollout](pw, schemas.Rollouts, schemas.WriterOptions{
		Metadata: map[string]string{"whale.run": x.Run, "whale.position": x.Position, "whale.stage": x.Stage}})
	if err != nil {
		return err
	}
	for _, r := range s.rows {
		r.Run, r.Position = x.Run, x.Position
		if err := w.Write(r); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	_, err = pw.Finish(w.Rows())
	return err
}

const (
	harnessA = "sha256:aaaaaaaaaaaa0123456789abcdef0123456789abcdef0123456789abcdef0000"
	harnessB = "sha256:bbbbbbbbbbbb0123456789abcdef0123456789abcdef0123456789abcdef0000"
)

// episodes makes one row per reward of task; a negative reward is a failed
// episode with reward 0. Correct means reward 1.
func episodes(harness, task string, rewards ...float64) []schemas.Rollout {
	var out []schemas.Rollout
	for i, r := range rewards {
		row := schemas.Rollout{ModelID: "m0", HarnessID: harness, TaskID: task, Sample: int32(i), Reward: max(r, 0),
			Correct: r == 1, Turns: int32(1 + i), PromptTokens: 100, CompletionTokens: int64(10 * (i + 1)),
			Messages: []schemas.Message{{Role: "user", Content: "q"}}}
		if r < 0 {
			row.Error = "model: 500"
		}
		out = append(out, row)
	}
	return out
}

func concat(parts ...[]schemas.Rollout) []schemas.Rollout {
	var out []schemas.Rollout
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// The fixture: run "alt" (schedule whale) has a rollout stage at r001-w01
// and an evaluate stage at r001-h01; run "base" (weights-only) a rollout
// stage at r001-w01.
var (
	altW  = concat(episodes(harnessA, "t1", 1, 0, 1, 0), episodes(harnessA, "t2", 0, 0, 0.5, 1))
	altH  = episodes(harnessB, "t1", 1, -1)
	baseW = concat(episodes(harnessA, "t1", 0, 0, 0, 1), episodes(harnessA, "t2", 0, 0, 0, 0))
)

// newRun writes run.json for a run of the example experiment with another
// name and schedule.
func newRun(t *testing.T, store *storage.Store, name, schedule string) {
	t.Helper()
	exp, err := spec.Load(exampleExperiment)
	if err != nil {
		t.Fatal(err)
	}
	exp.Name, exp.Schedule = name, schedule
	run, err := spec.Freeze(exp, "test", time.Now())
	if err != nil {
		t.Fatalf("freeze %s: %v", schedule, err)
	}
	data, err := run.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateExclusive(context.Background(), runKey(name), data); err != nil {
		t.Fatal(err)
	}
}

func commitStage(t *testing.T, store *storage.Store, run, position string, st stages.Stage) {
	t.Helper()
	res, err := stages.Execute(context.Background(), store, stages.Spec{Run: run, Position: position, Seed: 1,
		Log: slog.New(slog.DiscardHandler)}, st)
	if err != nil || !res.Committed {
		t.Fatalf("commit %s %s: %+v %v", run, position, res, err)
	}
}

// csvRows runs whale with --format csv and returns the records keyed by
// the group columns joined with "/".
func csvRows(t *testing.T, args ...string) map[string]map[string]string {
	t.Helper()
	res := whale(t, append(args, "--format", "csv")...)
	res.mustCode(t, exitOK)
	recs, err := csv.NewReader(strings.NewReader(res.stdout)).ReadAll()
	if err != nil || len(recs) < 1 {
		t.Fatalf("csv does not parse: %v\n%s", err, res.stdout)
	}
	head := recs[0]
	keys := slices.Index(head, "episodes")
	out := map[string]map[string]string{}
	for _, rec := range recs[1:] {
		m := map[string]string{}
		for i, h := range head {
			m[h] = rec[i]
		}
		out[strings.Join(rec[:keys], "/")] = m
	}
	return out
}

// near checks a CSV or JSON number against a hand-computed value.
func near(t *testing.T, what, got string, want float64) {
	t.Helper()
	v, err := strconv.ParseFloat(got, 64)
	if err != nil || math.Abs(v-want) > 1e-12 {
		t.Errorf("%s = %q, want %v", what, got, want)
	}
}

func TestAnalyzeRuns(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		store := openStore(t, r.url)
		newRun(t, store, "alt", "whale")
		newRun(t, store, "base", "weights-only")
		newRun(t, store, "fresh", "whale")
		commitStage(t, store, "alt", "r001-w01", fixedRollouts{"rollout", altW})
		commitStage(t, store, "alt", "r001-h01", fixedRollouts{"evaluate", altH})
		commitStage(t, store, "base", "r001-w01", fixedRollouts{"rollout", baseW})

		// Default: one line per stage, harness ids short, pass@k with k = n.
		tbl := whale(t, "analyze", "--root", r.url, "alt")
		tbl.mustCode(t, exitOK, "RUN", "MEAN@K", "PASS@K")
		for _, re := range []string{
			// t1 rewards 1,0,1,0 and t2 0,0,.5,1: mean@4 .4375, pass@4 1, accuracy (.5+.25)/2.
			`(?m)^alt\s+r001-w01\s+rollout\s+8\s+2\s+4\s+0\.438\s+1\.000\s+0\.375\s`,
			// One of two failed: FAILED 1, FAIL% 50.
			`(?m)^alt\s+r001-h01\s+evaluate\s+2\s+1\s+2\s+0\.500\s+1\.000\s+0\.500\s+1\.50\s+100\.0\s+15\.0\s+1\s+50\.0$`,
			`note: tasks have different sample counts \(n from 2 to 4\)`,
		} {
			if !regexp.MustCompile(re).MatchString(tbl.stdout) {
				t.Errorf("table does not match %s:\n%s", re, tbl.stdout)
			}
		}

		// Two runs compared by schedule and position, k = 2.
		rows := csvRows(t, "analyze", "alt", "base", "--root", r.url, "--by", "schedule,position", "--k", "2")
		if len(rows) != 3 {
			t.Fatalf("csv groups %v", rows)
		}
		// alt w01: t1 1 - C(2,2)/C(4,2) = 5/6, t2 1 - C(3,2)/C(4,2) = 1/2.
		near(t, "whale/r001-w01 pass@2", rows["whale/r001-w01"]["pass_at_k"], (5.0/6+0.5)/2)
		near(t, "whale/r001-w01 mean@2", rows["whale/r001-w01"]["mean_at_k"], 0.4375)
		near(t, "whale/r001-h01 pass@2", rows["whale/r001-h01"]["pass_at_k"], 1)
		near(t, "whale/r001-h01 failure rate", rows["whale/r001-h01"]["failure_rate"], 0.5)
		// base w01: t1 0,0,0,1 → 1 - C(3,2)/C(4,2) = 1/2; t2 all wrong → 0.
		near(t, "weights-only/r001-w01 pass@2", rows["weights-only/r001-w01"]["pass_at_k"], 0.25)
		near(t, "weights-only/r001-w01 mean@2", rows["weights-only/r001-w01"]["mean_at_k"], 0.125)
		near(t, "weights-only/r001-w01 accuracy", rows["weights-only/r001-w01"]["accuracy"], 0.125)
		// Turns 1..4 per task; completion tokens 10..40.
		near(t, "weights-only/r001-w01 turns", rows["weights-only/r001-w01"]["mean_turns"], 2.5)
		near(t, "weights-only/r001-w01 completion", rows["weights-only/r001-w01"]["mean_completion_tokens"], 25)
		near(t, "weights-only/r001-w01 prompt", rows["weights-only/r001-w01"]["mean_prompt_tokens"], 100)
		if rows["whale/r001-w01"]["k_min"] != "2" || rows["whale/r001-h01"]["k_max"] != "2" {
			t.Errorf("k columns: %v", rows)
		}

		// JSON by round and harness: full harness ids, rounds merged.
		js := whale(t, "analyze", "--root", r.url, "alt", "base", "--by", "round,harness", "--format", "json")
		js.mustCode(t, exitOK)
		var doc struct {
			By     []string         `json:"by"`
			Rows   int              `json:"rows"`
			Files  int              `json:"files"`
			Notes  []string         `json:"notes"`
			Groups []map[string]any `json:"groups"`
		}
		if err := json.Unmarshal([]byte(js.stdout), &doc); err != nil {
			t.Fatalf("json: %v\n%s", err, js.stdout)
		}
		if strings.Join(doc.By, ",") != "round,harness_id" || doc.Rows != 18 || doc.Files != 3 || len(doc.Groups) != 2 {
			t.Fatalf("json: %+v", doc)
		}
		a, b := doc.Groups[0], doc.Groups[1]
		// harness A in round 1: t1 has 8 samples (3 correct) from both runs,
		// t2 8 (1 correct): mean (3/8 + 1.5/8)/2.
		if a["round"] != "r001" || a["harness_id"] != harnessA || a["episodes"] != 16.0 || b["harness_id"] != harnessB || b["failed"] != 1.0 {
			t.Errorf("json groups: %v", doc.Groups)
		}
		near(t, "harness A mean@8", strconv.FormatFloat(a["mean_at_k"].(float64), 'g', -1, 64), (3.0/8+1.5/8)/2)
		near(t, "harness A accuracy", strconv.FormatFloat(a["accuracy"].(float64), 'g', -1, 64), (3.0/8+1.0/8)/2)

		// A run with nothing to analyse yet.
		whale(t, "analyze", "--root", r.url, "fresh").mustCode(t, exitOK, "(no rollouts)", "note: run fresh has no committed stage with rollouts yet")
		whale(t, "analyze", "--root", r.url, "nope").mustCode(t, exitUsage, `no run "nope"`)
	})
}

// writeRolloutFile writes rows as a local rollouts file.
func writeRolloutFile(t *testing.T, dir, name, stage string, rows []schemas.Rollout) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := schemas.NewWriter[schemas.Rollout](&buf, schemas.Rollouts, schemas.WriterOptions{Metadata: map[string]string{"whale.stage": stage}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAnalyzeLocalFiles(t *testing.T) {
	dir := t.TempDir()
	label := func(rows []schemas.Rollout, run, pos string) []schemas.Rollout {
		out := concat(rows)
		for i := range out {
			out[i].Run, out[i].Position = run, pos
		}
		return out
	}
	w := writeRolloutFile(t, dir, "w.parquet", "rollout", label(altW, "alt", "r001-w01"))
	h := writeRolloutFile(t, dir, "h.parquet", "evaluate", label(altH, "alt", "r001-h01"))
	// A file that exists is a file whatever its name.
	plain := filepath.Join(dir, "rollouts-copy")
	data, err := os.ReadFile(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, data, 0o644); err != nil {
		t.Fatal(err)
	}

	rows := csvRows(t, "analyze", w, h, "--by", "stage,section,schedule")
	near(t, "rollout mean", rows["rollout/weight/"]["mean_at_k"], 0.4375)
	near(t, "evaluate pass", rows["evaluate/harness/"]["pass_at_k"], 1)
	if len(rows) != 2 {
		t.Errorf("groups %v", rows)
	}
	whale(t, "analyze", w, plain, "--by", "").mustCode(t, exitOK, "EPISODES", "10 ")

	tbl := whale(t, "analyze", w, "--by", "harness,model")
	tbl.mustCode(t, exitOK, "HARNESS", "MODEL", "aaaaaaaaaaaa ")
	if strings.Contains(tbl.stdout, "sha256:") {
		t.Errorf("table shows full harness ids:\n%s", tbl.stdout)
	}

	// Not rollouts tables: exit 2, naming the file and what is missing.
	tasks := filepath.Join(dir, "tasks.parquet")
	var buf bytes.Buffer
	tw, err := schemas.NewWriter[schemas.Task](&buf, schemas.Tasks, schemas.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Write(schemas.Task{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tasks, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	type noReward struct {
		TaskID string `parquet:"task_id"`
		Turns  int32  `parquet:"turns"`
	}
	buf.Reset()
	if err := parquet.Write(&buf, []noReward{{"t", 1}}); err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(dir, "partial.parquet")
	if err := os.WriteFile(partial, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := writeFile(t, "garbage.parquet", "not parquet")
	whale(t, "analyze", w, partial).mustCode(t, exitUsage, partial, `column "reward": missing`)
	whale(t, "analyze", tasks).mustCode(t, exitUsage, tasks, `holds table "tasks"`)
	whale(t, "analyze", garbage).mustCode(t, exitUsage, garbage)
	whale(t, "analyze", filepath.Join(dir, "missing.parquet")).mustCode(t, exitUsage, "missing.parquet", "no such file")
}

func TestAnalyzeUsage(t *testing.T) {
	dir := t.TempDir()
	w := writeRolloutFile(t, dir, "w.parquet", "rollout", altW)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"no inputs", []string{"analyze"}, []string{"one or more"}},
		{"format", []string{"analyze", w, "--format", "xml"}, []string{"--format", "xml", "table, csv, json"}},
		{"by", []string{"analyze", w, "--by", "round,colour"}, []string{"--by", `"colour"`, "harness_id"}},
		{"k", []string{"analyze", w, "--k", "-1"}, []string{"--k"}},
		{"twice", []string{"analyze", w, w}, []string{"given twice"}},
		{"run without root", []string{"analyze", "somerun"}, []string{"--root"}},
		{"bad name", []string{"analyze", "Not A Run"}, []string{"neither a file nor a run name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WHALE_ROOT", "")
			whale(t, tc.args...).mustCode(t, exitUsage, tc.want...)
		})
	}
}
