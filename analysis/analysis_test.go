package analysis

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

func ep(pos, h, task string, reward float64, correct bool, turns int32, prompt, completion int64, errText string) schemas.Rollout {
	return schemas.Rollout{Run: "exp", Position: pos, ModelID: "m", HarnessID: h, TaskID: task, Reward: reward, Correct: correct,
		Turns: turns, PromptTokens: prompt, CompletionTokens: completion, Error: errText,
		Messages: []schemas.Message{{Role: "user", Content: "q " + task}}}
}

const (
	h1 = "sha256:1111111111111111aaaa"
	h2 = "sha256:2222222222222222bbbb"
)

// weightRows: one rollout stage at r001-w01, harness h1, two tasks of four
// samples each.
func weightRows() []schemas.Rollout {
	return []schemas.Rollout{
		ep("r001-w01", h1, "t1", 1, true, 2, 10, 5, ""),
		ep("r001-w01", h1, "t1", 0, false, 4, 20, 5, ""),
		ep("r001-w01", h1, "t1", 1, true, 2, 10, 5, ""),
		ep("r001-w01", h1, "t1", 0, false, 4, 30, 5, ""),
		ep("r001-w01", h1, "t2", 0, false, 1, 10, 0, ""),
		ep("r001-w01", h1, "t2", 0, false, 1, 10, 0, ""),
		ep("r001-w01", h1, "t2", 0.5, false, 3, 10, 0, ""),
		ep("r001-w01", h1, "t2", 1, true, 3, 10, 0, ""),
	}
}

// harnessRows: one evaluate stage at r001-h01, harness h2, one task with two
// samples, one of which failed.
func harnessRows() []schemas.Rollout {
	return []schemas.Rollout{
		ep("r001-h01", h2, "t1", 1, true, 5, 100, 50, ""),
		ep("r001-h01", h2, "t1", 0, false, 1, 7, 0, "model: 500"),
	}
}

// writeFile writes rows as a rollouts file with the footer keys a stage
// writes.
func writeFile(t testing.TB, dir, name string, meta map[string]string, opts schemas.WriterOptions, rows []schemas.Rollout) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts.Metadata = meta
	w, err := schemas.NewWriter[schemas.Rollout](f, schemas.Rollouts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func addFile(t testing.TB, a *Analyzer, path string, l Labels) error {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return a.AddFile(context.Background(), path, f, st.Size(), l)
}

// fixtureFiles writes the two stages as loose files, as `whale analyze
// FILE...` sees them.
func fixtureFiles(t testing.TB) []string {
	dir := t.TempDir()
	return []string{
		writeFile(t, dir, "w.parquet", map[string]string{"whale.stage": "rollout"}, schemas.WriterOptions{}, weightRows()),
		writeFile(t, dir, "h.parquet", map[string]string{"whale.stage": "evaluate"}, schemas.WriterOptions{}, harnessRows()),
	}
}

func analyse(t *testing.T, opts Options, files []string) Result {
	t.Helper()
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := addFile(t, a, f, Labels{}); err != nil {
			t.Fatal(err)
		}
	}
	return a.Result()
}

// The expected scores are worked out by hand from weightRows and
// harnessRows; each mean is over tasks.
var (
	// r001-w01: t1 rewards 1,0,1,0 (2 of 4 correct), t2 0,0,.5,1 (1 of 4).
	wantW = Group{Episodes: 8, Tasks: 2, KMin: 4, KMax: 4,
		MeanAtK: (0.5 + 0.375) / 2, PassAtK: 1, Accuracy: (0.5 + 0.25) / 2,
		MeanTurns: (3 + 2) / 2.0, MeanPromptTokens: (17.5 + 10) / 2, MeanCompletionTokens: (5 + 0) / 2.0}
	// r001-h01: t1 rewards 1,0, one failed.
	wantH = Group{Episodes: 2, Tasks: 1, KMin: 2, KMax: 2, MeanAtK: 0.5, PassAtK: 1, Accuracy: 0.5,
		MeanTurns: 3, MeanPromptTokens: 53.5, MeanCompletionTokens: 25, Failed: 1, FailureRate: 0.5}
)

func with(g Group, key ...string) Group {
	g.Key = key
	return g
}

func TestAnalyzeFiles(t *testing.T) {
	files := fixtureFiles(t)
	wK2 := wantW
	wK2.KMin, wK2.KMax = 2, 2
	// t1: 1 - C(2,2)/C(4,2) = 5/6; t2: 1 - C(3,2)/C(4,2) = 1/2.
	wK2.PassAtK = (5.0/6 + 0.5) / 2
	hK2 := wantH
	wK3 := wantW
	wK3.KMin, wK3.KMax = 3, 3
	// t1: 1 - C(2,3)/C(4,3) = 1; t2: 1 - C(3,3)/C(4,3) = 3/4.
	wK3.PassAtK = (1 + 0.75) / 2

	// One round: t1 has 6 samples from both stages (rewards 1,0,1,0,1,0,
	// turns 2,4,2,4,5,1, prompt 10,20,10,30,100,7, completion 5,5,5,5,50,0),
	// t2 four.
	round := Group{Key: []string{"r001"}, Episodes: 10, Tasks: 2, KMin: 4, KMax: 6,
		MeanAtK: (0.5 + 0.375) / 2, PassAtK: 1, Accuracy: (0.5 + 0.25) / 2,
		MeanTurns: (3 + 2) / 2.0, MeanPromptTokens: (177.0/6 + 10) / 2, MeanCompletionTokens: (70.0 / 6) / 2,
		Failed: 1, FailureRate: 0.1}
	roundK2 := round
	roundK2.KMin, roundK2.KMax = 2, 2
	// t1: 1 - C(3,2)/C(6,2) = 1 - 3/15; t2: 1/2 as above.
	roundK2.PassAtK = (1 - 3.0/15 + 0.5) / 2

	cases := []struct {
		name  string
		opts  Options
		want  []Group
		notes []string
	}{
		{"default grouping", Options{}, []Group{with(wantW, "exp", "r001-w01", "rollout"), with(wantH, "exp", "r001-h01", "evaluate")},
			[]string{"different sample counts (n from 2 to 4)"}},
		{"k=2", Options{By: []string{DimPosition}, K: 2}, []Group{with(wK2, "r001-w01"), with(hK2, "r001-h01")}, nil},
		{"k=3 above a task's n", Options{By: []string{DimPosition}, K: 3}, []Group{with(wK3, "r001-w01"), with(wantH, "r001-h01")},
			[]string{"1 (group, task) pairs have fewer than k = 3"}},
		{"harness and section", Options{By: []string{DimHarness, DimSection}},
			[]Group{with(wantW, h1, "weight"), with(wantH, h2, "harness")}, []string{"n from 2 to 4"}},
		{"stage and model", Options{By: []string{DimStage, DimModel}},
			[]Group{with(wantH, "evaluate", "m"), with(wantW, "rollout", "m")}, []string{"n from 2 to 4"}},
		{"round merges the stages", Options{By: []string{DimRound}}, []Group{round}, []string{"n from 4 to 6", "--k"}},
		{"round, k=2", Options{By: []string{DimRound}, K: 2}, []Group{roundK2}, nil},
		{"one group", Options{By: []string{}}, []Group{with(round)}, []string{"n from 4 to 6"}},
		{"files have no schedule", Options{By: []string{DimSchedule, DimRun}}, []Group{with(round, "", "exp")}, []string{"n from 4 to 6"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := analyse(t, tc.opts, files)
			checkGroups(t, r.Groups, tc.want)
			if r.Rows != 10 || r.Files != 2 {
				t.Errorf("rows %d files %d, want 10 and 2", r.Rows, r.Files)
			}
			if len(tc.notes) == 0 && len(r.Notes) != 0 {
				t.Errorf("unexpected notes %q", r.Notes)
			}
			for _, n := range tc.notes {
				if !slices.ContainsFunc(r.Notes, func(s string) bool { return strings.Contains(s, n) }) {
					t.Errorf("notes %q do not mention %q", r.Notes, n)
				}
			}
		})
	}
}

func checkGroups(t *testing.T, got, want []Group) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d groups, want %d:\n%+v", len(got), len(want), got)
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-12 }
	for i := range got {
		g, w := got[i], want[i]
		if w.Key == nil {
			w.Key = []string{}
		}
		if !slices.Equal(g.Key, w.Key) || g.Episodes != w.Episodes || g.Tasks != w.Tasks || g.KMin != w.KMin || g.KMax != w.KMax ||
			g.Failed != w.Failed || !near(g.MeanAtK, w.MeanAtK) || !near(g.PassAtK, w.PassAtK) || !near(g.Accuracy, w.Accuracy) ||
			!near(g.MeanTurns, w.MeanTurns) || !near(g.MeanPromptTokens, w.MeanPromptTokens) ||
			!near(g.MeanCompletionTokens, w.MeanCompletionTokens) || !near(g.FailureRate, w.FailureRate) {
			t.Errorf("group %d:\n got  %+v\n want %+v", i, g, w)
		}
	}
}

// Labels override what the rows say: a run read from a bucket is named by
// its folder, whatever its rows were written under.
func TestAnalyzeLabels(t *testing.T) {
	files := fixtureFiles(t)
	a, err := New(Options{By: []string{DimRun, DimSchedule, DimRound, DimSection, DimStage}})
	if err != nil {
		t.Fatal(err)
	}
	if err := addFile(t, a, files[0], Labels{Run: "copy", Schedule: "whale", Position: "r002-wt", Stage: "evaluate"}); err != nil {
		t.Fatal(err)
	}
	if err := addFile(t, a, files[1], Labels{}); err != nil {
		t.Fatal(err)
	}
	r := a.Result()
	checkGroups(t, r.Groups, []Group{
		with(wantW, "copy", "whale", "r002", "test", "evaluate"),
		with(wantH, "exp", "", "r001", "harness", "evaluate"),
	})
}

// Rows in any order, split over files any way, give the same result.
func TestAnalyzeOrderIndependent(t *testing.T) {
	rows := append(weightRows(), harnessRows()...)
	rng := rand.New(rand.NewPCG(3, 4))
	ref := analyse(t, Options{By: []string{DimRound, DimHarness}, K: 2}, fixtureFiles(t))
	for try := range 4 {
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		dir := t.TempDir()
		cut := 1 + rng.IntN(len(rows)-1)
		files := []string{
			writeFile(t, dir, "a.parquet", nil, schemas.WriterOptions{RowGroupRows: 3}, rows[:cut]),
			writeFile(t, dir, "b.parquet", nil, schemas.WriterOptions{RowGroupRows: 2}, rows[cut:]),
		}
		got := analyse(t, Options{By: []string{DimRound, DimHarness}, K: 2}, files)
		if !reflect.DeepEqual(got.Groups, ref.Groups) {
			t.Fatalf("try %d: %+v\nwant %+v", try, got.Groups, ref.Groups)
		}
	}
}

func TestAnalyzeSortsPositionsAsThePlanner(t *testing.T) {
	var rows []schemas.Rollout
	// String order would put r1000 before r999 and h before w.
	for _, p := range []string{"r1000-w01", "r999-ht", "r999-h02", "r999-w10", "r999-w02", "r999-wt", "tasks-x"} {
		rows = append(rows, ep(p, h1, "t", 1, true, 1, 1, 1, ""))
	}
	path := writeFile(t, t.TempDir(), "p.parquet", nil, schemas.WriterOptions{}, rows)
	for _, by := range [][]string{{DimPosition}, {DimRound, DimSection}} {
		r := analyse(t, Options{By: by}, []string{path})
		var got []string
		for _, g := range r.Groups {
			got = append(got, strings.Join(g.Key, "/"))
		}
		want := map[string][]string{
			"position": {"r999-w02", "r999-w10", "r999-wt", "r999-h02", "r999-ht", "r1000-w01", "tasks-x"},
			"round":    {"r999/harness", "r999/test", "r999/weight", "r1000/weight", "/"},
		}[by[0]]
		if !slices.Equal(got, want) {
			t.Errorf("by %v: %q, want %q", by, got, want)
		}
	}
}

// foreignRollout is a rollouts row as another tool might write it: other
// integer and float widths, nullable columns.
type foreignRollout struct {
	Run              string               `parquet:"run"`
	Position         string               `parquet:"position"`
	ModelID          string               `parquet:"model_id"`
	HarnessID        string               `parquet:"harness_id"`
	TaskID           string               `parquet:"task_id"`
	Sample           int64                `parquet:"sample"`
	Seed             int64                `parquet:"seed"`
	Reward           float32              `parquet:"reward"`
	Correct          bool                 `parquet:"correct"`
	Answer           string               `parquet:"answer,optional"`
	FinishReason     string               `parquet:"finish_reason"`
	Error            string               `parquet:"error,optional"`
	Turns            int64                `parquet:"turns"`
	PromptTokens     int32                `parquet:"prompt_tokens"`
	CompletionTokens int64                `parquet:"completion_tokens,optional"`
	LatencyMS        int64                `parquet:"latency_ms"`
	Messages         []messageV1          `parquet:"messages,list"`
	Trace            []schemas.TraceEvent `parquet:"trace,list"`
}

// messageV1 is a message of rollouts schema version 1 (no reasoning, no
// token ids): foreignRollout is also a file of the previous whale, which
// had no tools column either.
type messageV1 struct {
	Role       string             `parquet:"role"`
	Content    string             `parquet:"content"`
	Name       string             `parquet:"name"`
	ToolCallID string             `parquet:"tool_call_id"`
	ToolCalls  []schemas.ToolCall `parquet:"tool_calls,list"`
}

func TestAnalyzeForeignLayout(t *testing.T) {
	var rows []foreignRollout
	for _, r := range append(weightRows(), harnessRows()...) {
		rows = append(rows, foreignRollout{Run: r.Run, Position: r.Position, ModelID: r.ModelID, HarnessID: r.HarnessID, TaskID: r.TaskID,
			Reward: float32(r.Reward), Correct: r.Correct, Error: r.Error, Turns: int64(r.Turns),
			PromptTokens: int32(r.PromptTokens), CompletionTokens: r.CompletionTokens,
			Messages: []messageV1{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}}})
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "foreign.parquet")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	r := analyse(t, Options{By: []string{DimPosition}}, []string{p})
	checkGroups(t, r.Groups, []Group{with(wantW, "r001-w01"), with(wantH, "r001-h01")})
}

func TestAnalyzeRejectsOtherTables(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.parquet")
	var buf bytes.Buffer
	w, err := schemas.NewWriter[schemas.Task](&buf, schemas.Tasks, schemas.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(schemas.Task{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tasks, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The same columns without the whale.table key: judged by columns.
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
	garbage := filepath.Join(dir, "garbage.parquet")
	if err := os.WriteFile(garbage, []byte("not parquet at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path     string
		mismatch bool
		want     []string
	}{
		{tasks, true, []string{tasks, `"tasks"`, `"rollouts"`}},
		{partial, true, []string{partial, `column "reward": missing`, `column "messages": missing`}},
		{garbage, false, []string{garbage}},
	}
	for _, tc := range cases {
		a, _ := New(Options{})
		err := addFile(t, a, tc.path, Labels{})
		if err == nil {
			t.Fatalf("%s: no error", tc.path)
		}
		if errors.Is(err, schemas.ErrSchemaMismatch) != tc.mismatch {
			t.Errorf("%s: errors.Is(ErrSchemaMismatch) = %v, want %v: %v", tc.path, !tc.mismatch, tc.mismatch, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %q", err, w)
			}
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, o := range []Options{{By: []string{"nope"}}, {By: []string{DimRun, DimRun}}, {K: -1}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestParseBy(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{"round,harness", []string{DimRound, DimHarness}, ""},
		{" run , model_id,task", []string{DimRun, DimModel, DimTask}, ""},
		{"", []string{}, ""},
		{"round,round", nil, "twice"},
		{"harness,harness_id", nil, "twice"},
		{"rnd", nil, `unknown group column "rnd"`},
		{"run,", nil, `unknown group column ""`},
	}
	for _, tc := range cases {
		got, err := ParseBy(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBy(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseBy(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseBy(f *testing.F) {
	for _, s := range []string{"round,harness", "", "run,position,stage", "task,,x", "model , section"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		by, err := ParseBy(s)
		if err != nil {
			return
		}
		// What parses names known columns once each, and prints back to
		// the same list.
		if _, err := New(Options{By: by}); err != nil {
			t.Fatalf("ParseBy(%q) = %q, which New rejects: %v", s, by, err)
		}
		again, err := ParseBy(strings.Join(by, ","))
		if err != nil || !slices.Equal(again, by) {
			t.Fatalf("round trip of %q: %q, %v", by, again, err)
		}
	})
}

func TestWriteFormats(t *testing.T) {
	r := analyse(t, Options{By: []string{DimHarness, DimRound}}, fixtureFiles(t))
	r.Notes = []string{"a note"}

	var b bytes.Buffer
	if err := r.Write(&b, FormatCSV); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || !slices.Equal(recs[0], r.Columns()) || recs[0][0] != "harness_id" || recs[0][2] != "episodes" {
		t.Fatalf("csv: %q", recs)
	}
	for i, g := range r.Groups {
		rec := recs[i+1]
		if rec[0] != g.Key[0] || rec[1] != g.Key[1] {
			t.Errorf("csv row %d keys %q, want %q", i, rec[:2], g.Key)
		}
		for j, col := range metricColumns {
			v, err := strconv.ParseFloat(rec[2+j], 64)
			if err != nil {
				t.Fatalf("csv %s: %v", col, err)
			}
			if want := metricOf(g, col); v != want {
				t.Errorf("csv row %d %s = %v, want %v", i, col, v, want)
			}
		}
	}

	b.Reset()
	if err := r.Write(&b, FormatJSON); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if m, err := json.Marshal(r); err != nil || !bytes.Equal(m, compact.Bytes()) {
		t.Errorf("json.Marshal(result) differs from --format json: %v\n%s", err, m)
	}
	var doc struct {
		By     []string         `json:"by"`
		K      int              `json:"k"`
		Rows   int64            `json:"rows"`
		Notes  []string         `json:"notes"`
		Groups []map[string]any `json:"groups"`
	}
	dec := json.NewDecoder(&b)
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(doc.By, r.By) || doc.Rows != 10 || len(doc.Groups) != 2 || !slices.Equal(doc.Notes, r.Notes) {
		t.Fatalf("json: %+v", doc)
	}
	for i, g := range r.Groups {
		jg := doc.Groups[i]
		if jg["harness_id"] != g.Key[0] || jg["round"] != g.Key[1] || len(jg) != 2+len(metricColumns) {
			t.Errorf("json group %d: %v", i, jg)
		}
		for _, col := range metricColumns {
			v, err := jg[col].(json.Number).Float64()
			if err != nil || v != metricOf(g, col) {
				t.Errorf("json group %d %s = %v, want %v", i, col, jg[col], metricOf(g, col))
			}
		}
	}

	b.Reset()
	if err := r.Write(&b, FormatTable); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "HARNESS") || !strings.Contains(lines[0], "PASS@K") ||
		!strings.HasPrefix(lines[1], "111111111111 ") || strings.Contains(lines[1], "sha256") ||
		!strings.Contains(lines[1], " 0.438 ") || !strings.Contains(lines[2], " 50.0") || lines[3] != "note: a note" {
		t.Errorf("table:\n%s", b.String())
	}

	if err := r.Write(io.Discard, "xml"); err == nil || !strings.Contains(err.Error(), "table, csv, json") {
		t.Errorf("unknown format: %v", err)
	}
	b.Reset()
	empty := analyse(t, Options{}, nil)
	if err := empty.Write(&b, FormatTable); err != nil || !strings.Contains(b.String(), "(no rollouts)") {
		t.Errorf("empty table: %q %v", b.String(), err)
	}
	b.Reset()
	if err := empty.Write(&b, FormatJSON); err != nil || !json.Valid(b.Bytes()) || !strings.Contains(b.String(), `"groups":[]`) {
		t.Errorf("empty json: %q %v", b.String(), err)
	}
}

func metricOf(g Group, col string) float64 {
	return map[string]float64{"episodes": float64(g.Episodes), "tasks": float64(g.Tasks), "k_min": float64(g.KMin), "k_max": float64(g.KMax),
		"mean_at_k": g.MeanAtK, "pass_at_k": g.PassAtK, "accuracy": g.Accuracy, "mean_turns": g.MeanTurns,
		"mean_prompt_tokens": g.MeanPromptTokens, "mean_completion_tokens": g.MeanCompletionTokens,
		"failed": float64(g.Failed), "failure_rate": g.FailureRate}[col]
}

func TestShortHarness(t *testing.T) {
	for in, want := range map[string]string{
		"sha256:0123456789abcdef": "0123456789ab",
		"0123456789abcdef":        "0123456789ab",
		"short":                   "short",
		"":                        "",
	} {
		if got := ShortHarness(in); got != want {
			t.Errorf("ShortHarness(%q) = %q, want %q", in, got, want)
		}
	}
}

// rolloutStage is a stage that writes fixed rollout rows, for runs in a
// bucket.
type rolloutStage struct {
	name string
	rows []schemas.Rollout
}

func (s rolloutStage) Name() string { return s.name }

func (s rolloutStage) Run(ctx context.Context, x *stages.Exec) error {
	pw, err := x.Create(ctx, RolloutsTable+".parquet")
	if err != nil {
		return err
	}
	w, err := schemas.NewWriter[schemas.Rollout](pw, schemas.Rollouts, schemas.WriterOptions{})
	if err != nil {
		return err
	}
	if err := w.Write(s.rows...); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	_, err = pw.Finish(w.Rows())
	return err
}

// otherStage commits a table that is not rollouts; analysis skips it.
type otherStage struct{}

func (otherStage) Name() string { return "filter" }

func (otherStage) Run(ctx context.Context, x *stages.Exec) error {
	pw, err := x.Create(ctx, "sft.txt")
	if err != nil {
		return err
	}
	_, err = pw.Finish(0)
	return err
}

func TestAddRun(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exec := func(pos string, st stages.Stage) {
		t.Helper()
		if _, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: pos, Seed: 1, Log: slog.New(slog.DiscardHandler)}, st); err != nil {
			t.Fatal(err)
		}
	}
	exec("r001-w01", rolloutStage{"rollout", weightRows()})
	exec("r001-w01", otherStage{})
	exec("r001-h01", rolloutStage{"evaluate", harnessRows()})

	a, err := New(Options{By: []string{DimRun, DimSchedule, DimPosition, DimStage}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := a.AddRun(ctx, s, "exp", "whale")
	if err != nil || n != 2 {
		t.Fatalf("AddRun: %d stages, %v", n, err)
	}
	if n, err := a.AddRun(ctx, s, "empty", "weights-only"); err != nil || n != 0 {
		t.Fatalf("AddRun of an empty run: %d, %v", n, err)
	}
	r := a.Result()
	checkGroups(t, r.Groups, []Group{
		with(wantW, "exp", "whale", "r001-w01", "rollout"),
		with(wantH, "exp", "whale", "r001-h01", "evaluate"),
	})
	if len(r.Notes) != 3 || !strings.Contains(r.Notes[0], "run empty has no committed stage with rollouts") ||
		!strings.Contains(r.Notes[2], "run exp has no test evaluation yet") {
		t.Errorf("notes %q", r.Notes)
	}
}

// A NaN or infinite mean (a verifier that returned NaN) is null in JSON,
// not a failure of the whole output.
func TestJSONNonFinite(t *testing.T) {
	r := Result{By: []string{"position"}, K: 1, Groups: []Group{{Key: []string{"r001-w01"}, Episodes: 2, Tasks: 1,
		MeanAtK: math.NaN(), Accuracy: math.Inf(1)}},
		Headlines: []Headline{{Run: "exp", Tests: 1, Final: TestScore{Position: "r000-t", MeanAtK: math.NaN()}, Peak: TestScore{Position: "r000-t", MeanAtK: math.NaN()}}}}
	var b strings.Builder
	if err := r.Write(&b, FormatJSON); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Groups    []map[string]any `json:"groups"`
		Headlines []struct {
			Peak map[string]any `json:"peak"`
		} `json:"headlines"`
	}
	if err := json.Unmarshal([]byte(b.String()), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	if x, ok := v.Headlines[0].Peak["mean_at_k"]; !ok || x != nil {
		t.Errorf("peak mean_at_k = %v (present %v), want null", x, ok)
	}
	g := v.Groups[0]
	for _, k := range []string{"mean_at_k", "accuracy"} {
		if x, ok := g[k]; !ok || x != nil {
			t.Errorf("%s = %v (present %v), want null", k, x, ok)
		}
	}
	if g["episodes"] != 2.0 {
		t.Errorf("group %v", g)
	}
}
