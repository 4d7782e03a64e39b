package filter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

const (
	run = "exp"
	pos = "r001-w01"
)

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

// source is a test rollout stage: each element of files becomes one
// rollouts Parquet file, as the shards of a real rollout stage leave them.
type source struct {
	files [][]schemas.Rollout
	write func(ctx context.Context, x *stages.Exec) error // replaces files when set
}

func (source) Name() string { return "rollout" }

func (src source) Run(ctx context.Context, x *stages.Exec) error {
	if src.write != nil {
		return src.write(ctx, x)
	}
	for _, rows := range src.files {
		if err := writeTable(ctx, x, "rollouts.parquet", schemas.Rollouts, rows); err != nil {
			return err
		}
	}
	return nil
}

func writeTable[T any](ctx context.Context, x *stages.Exec, file string, table schemas.Table, rows []T) error {
	pw, err := x.Create(ctx, file)
	if err != nil {
		return err
	}
	w, err := schemas.NewWriter[T](pw, table, schemas.WriterOptions{RowGroupRows: 64})
	if err != nil {
		return err
	}
	if err := w.Write(rows...); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	_, err = pw.Finish(w.Rows())
	return err
}

func commitSource(t testing.TB, s *storage.Store, src source) {
	t.Helper()
	_, err := stages.Execute(context.Background(), s, stages.Spec{Run: run, Position: pos, Seed: 1, Log: quiet}, src)
	if err != nil {
		t.Fatalf("commit rollouts: %v", err)
	}
}

// runFilter executes every shard of the filter stage and returns the last
// result, which holds the committed manifest.
func runFilter(s *storage.Store, cfg any, shards int) (stages.Result, error) {
	var res stages.Result
	for sh := range max(shards, 1) {
		var err error
		res, err = stages.Execute(context.Background(), s, stages.Spec{
			Run: run, Position: pos, Config: cfg, Seed: 1, Shards: shards, Shard: sh, Log: quiet,
			Inputs: []stages.InputRef{{Name: Input, Position: pos, Stage: "rollout"}},
		}, Stage{})
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func readSFT(t testing.TB, s *storage.Store, m *storage.Manifest) []schemas.SFTExample {
	t.Helper()
	ctx := context.Background()
	var out []schemas.SFTExample
	for _, f := range m.Table("sft") {
		ra, err := m.OpenFile(ctx, s, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.ReadRows(ctx, ra, ra.Size(), func(e schemas.SFTExample) error {
			out = append(out, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func readAcceptance(t testing.TB, s *storage.Store, m *storage.Manifest) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for _, f := range m.Table("acceptance") {
		r, err := m.NewFileReader(context.Background(), s, f)
		if err != nil {
			t.Fatal(err)
		}
		var rows []acceptanceRow
		if err := json.NewDecoder(r).Decode(&rows); err != nil {
			t.Fatalf("acceptance file %s: %v", f.Name, err)
		}
		r.Close()
		if int64(len(rows)) != f.Rows {
			t.Fatalf("acceptance file %s: %d rows, manifest says %d", f.Name, len(rows), f.Rows)
		}
		for _, a := range rows {
			if _, dup := out[a.TaskID]; dup {
				t.Fatalf("task %s in two acceptance rows", a.TaskID)
			}
			out[a.TaskID] = [2]int64{a.Episodes, a.Accepted}
		}
	}
	return out
}

func msg(role, content string) schemas.Message { return schemas.Message{Role: role, Content: content} }

// transcript is a tool-using episode: system, question, a reply that calls
// a tool, the tool's result, feedback, and the final answer.
func transcript(task string, sample int32) []schemas.Message {
	tag := fmt.Sprintf("%s/%d", task, sample)
	call := schemas.Message{Role: "assistant", Content: "<search>q " + tag + "</search>",
		ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query":"q"}`}}}
	return []schemas.Message{
		msg("system", "You answer questions."),
		msg("user", "Question "+tag),
		call,
		{Role: "tool", Content: "doc for " + tag, ToolCallID: "c1", Name: "search"},
		msg("user", "Feedback: answer inside <answer> tags."),
		msg("assistant", "<answer>"+tag+"</answer>"),
	}
}

var transcriptMask = []bool{false, false, true, false, false, true}

func ro(task string, sample int32, reward float64, errText string) schemas.Rollout {
	return schemas.Rollout{
		Run: run, Position: pos, ModelID: "m0", HarnessID: "h0", TaskID: task, Sample: sample, Seed: int64(sample),
		Reward: reward, Correct: reward == 1, Error: errText, Turns: 2,
		PromptTokens: 100, CompletionTokens: int64(10 * (sample + 1)),
		Messages: transcript(task, sample),
		Trace: []schemas.TraceEvent{
			{Turn: 1, Kind: KindModel, Action: "chat"}, {Turn: 1, Kind: "tool", Action: "search"},
			{Turn: 2, Kind: KindModel, Action: "chat"},
		},
	}
}

// twoFiles: three tasks over two rollout files; t2's second sample failed
// with reward 1 (it must still be rejected).
func twoFiles() [][]schemas.Rollout {
	return [][]schemas.Rollout{
		{ro("t1", 0, 1, ""), ro("t1", 1, 0, ""), ro("t1", 2, 0.5, ""), ro("t2", 0, 0.75, "")},
		{ro("t2", 1, 1, "model: 500 after 8 tries"), ro("t3", 0, 0, "")},
	}
}

func exampleIDs(exs []schemas.SFTExample) []string {
	out := make([]string, len(exs))
	for i, e := range exs {
		out[i] = e.ExampleID
	}
	return out
}

func TestFilterThresholds(t *testing.T) {
	// Over twoFiles: 6 episodes, 1 failed, reward sum 3.25, 3 tasks.
	cases := []struct {
		name       string
		cfg        any
		ids        []string
		tokens     int64
		acceptance map[string][2]int64
	}{
		{"default 0.5 (nil config)", nil, []string{"t1/0@r001-w01", "t2/0@r001-w01"}, 20,
			map[string][2]int64{"t1": {3, 1}, "t2": {2, 1}, "t3": {1, 0}}},
		{"0.5 explicit", Config{Threshold: 0.5}, []string{"t1/0@r001-w01", "t2/0@r001-w01"}, 20,
			map[string][2]int64{"t1": {3, 1}, "t2": {2, 1}, "t3": {1, 0}}},
		{"0 accepts any positive reward", Config{Threshold: 0}, []string{"t1/0@r001-w01", "t1/2@r001-w01", "t2/0@r001-w01"}, 50,
			map[string][2]int64{"t1": {3, 2}, "t2": {2, 1}, "t3": {1, 0}}},
		{"0.9", map[string]any{"threshold": 0.9}, []string{"t1/0@r001-w01"}, 10,
			map[string][2]int64{"t1": {3, 1}, "t2": {2, 0}, "t3": {1, 0}}},
		{"1 is strict: nothing accepted", Config{Threshold: 1}, []string{}, 0,
			map[string][2]int64{"t1": {3, 0}, "t2": {2, 0}, "t3": {1, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, "mem://")
			commitSource(t, s, source{files: twoFiles()})
			res, err := runFilter(s, tc.cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Manifest
			exs := readSFT(t, s, m)
			if got := exampleIDs(exs); !slices.Equal(got, tc.ids) {
				t.Fatalf("examples %v, want %v", got, tc.ids)
			}
			if len(m.Table("sft")) != 1 || m.Rows("sft") != int64(len(tc.ids)) {
				t.Fatalf("sft table: %d files, %d rows; want 1 file, %d rows", len(m.Table("sft")), m.Rows("sft"), len(tc.ids))
			}
			for _, e := range exs {
				if !strings.HasPrefix(e.ExampleID, e.TaskID+"/") || e.EpisodeID != e.ExampleID {
					t.Errorf("example %s: episode %s, task %s", e.ExampleID, e.EpisodeID, e.TaskID)
				}
			}
			acc := int64(len(tc.ids))
			tasksAcc := int64(0)
			for _, c := range tc.acceptance {
				if c[1] > 0 {
					tasksAcc++
				}
			}
			want := map[string]any{
				"episodes": 6.0, "accepted": float64(acc), "acceptance_rate": float64(acc) / 6, "failed": 1.0,
				"reward_sum": 3.25, "mean_reward": 3.25 / 6, "accepted_tokens": float64(tc.tokens),
				"tasks": 3.0, "tasks_accepted": float64(tasksAcc), "examples": float64(acc), "empty_examples": 0.0,
			}
			if !maps.Equal(m.Summary, want) {
				t.Fatalf("summary\n got  %v\n want %v", m.Summary, want)
			}
			if got := readAcceptance(t, s, m); !maps.Equal(got, tc.acceptance) {
				t.Fatalf("acceptance %v, want %v", got, tc.acceptance)
			}
		})
	}
}

// The whole stage on each backend: several input files, masks, the
// acceptance file, and an idempotent rerun.
func TestFilterStores(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		commitSource(t, s, source{files: twoFiles()})
		res, err := runFilter(s, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !res.CommittedHere {
			t.Fatalf("not committed: %+v", res)
		}
		exs := readSFT(t, s, res.Manifest)
		if len(exs) != 2 {
			t.Fatalf("%d examples, want 2", len(exs))
		}
		for _, e := range exs {
			var sample int32
			fmt.Sscanf(e.ExampleID[len(e.TaskID)+1:], "%d", &sample)
			if want := transcript(e.TaskID, sample); !slices.EqualFunc(e.Messages, want, msgEqual) {
				t.Errorf("%s: messages %+v, want the transcript %+v", e.ExampleID, e.Messages, want)
			}
			if !slices.Equal(e.TrainMask, transcriptMask) {
				t.Errorf("%s: mask %v, want %v", e.ExampleID, e.TrainMask, transcriptMask)
			}
		}
		if got := readAcceptance(t, s, res.Manifest); len(got) != 3 {
			t.Fatalf("acceptance %v", got)
		}
		again, err := runFilter(s, nil, 1)
		if err != nil || !again.Skipped {
			t.Fatalf("rerun: %+v %v", again, err)
		}
	})
}

func msgEqual(a, b schemas.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.Name == b.Name && a.ToolCallID == b.ToolCallID &&
		slices.Equal(a.ToolCalls, b.ToolCalls)
}

func contextJSON(t testing.TB, msgs ...schemas.Message) string {
	b, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A harness with context management: turn 2's context is a summary, not
// the transcript, and turn 3 sent no context event.
func contextRollout(t testing.TB) schemas.Rollout {
	r := ro("c1", 0, 1, "")
	sys, q := msg("system", "S"), msg("user", "Q")
	a1 := schemas.Message{Role: "assistant", Content: "search it", ToolCalls: []schemas.ToolCall{{ID: "x", Name: "search", Arguments: "{}"}}}
	tool := schemas.Message{Role: "tool", Content: "long document", ToolCallID: "x"}
	a2, fb, a3 := msg("assistant", "guess"), msg("user", "wrong format"), msg("assistant", "<answer>A</answer>")
	r.Messages = []schemas.Message{sys, q, a1, tool, a2, fb, a3}
	r.Trace = []schemas.TraceEvent{
		{Turn: 1, Kind: "hook", Action: "build_messages"},
		{Turn: 1, Kind: KindContext, Action: contextJSON(t, sys, q)},
		{Turn: 1, Kind: KindModel, Action: "chat"},
		{Turn: 1, Kind: "tool", Action: "search"},
		{Turn: 2, Kind: KindContext, Action: contextJSON(t, sys, msg("user", "Q (summary: long…)"))},
		{Turn: 2, Kind: KindModel, Action: "chat"},
		{Turn: 2, Kind: "error", Action: "parse", Feedback: "wrong format"},
		{Turn: 3, Kind: KindModel, Action: "chat"},
	}
	return r
}

func TestExamples(t *testing.T) {
	ctxRow := contextRollout(t)
	sys, q := msg("system", "S"), msg("user", "Q")
	cases := []struct {
		name  string
		r     schemas.Rollout
		ids   []string
		msgs  [][]schemas.Message
		masks [][]bool
	}{
		{"transcript: loss on assistant messages only", ro("t", 4, 1, ""),
			[]string{"t/4@r001-w01"}, [][]schemas.Message{transcript("t", 4)}, [][]bool{transcriptMask}},
		// Turn 3 has no context event: it was sent the default context.
		{"context events: one example per call", ctxRow,
			[]string{"c1/0@r001-w01#1", "c1/0@r001-w01#2", "c1/0@r001-w01#3"},
			[][]schemas.Message{{sys, q, ctxRow.Messages[2]}, {sys, msg("user", "Q (summary: long…)"), ctxRow.Messages[4]}, ctxRow.Messages},
			[][]bool{{false, false, true}, {false, false, true}, {false, false, false, false, false, false, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exs, err := Examples(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if got := exampleIDs(exs); !slices.Equal(got, tc.ids) {
				t.Fatalf("ids %v, want %v", got, tc.ids)
			}
			for i, e := range exs {
				if e.EpisodeID != EpisodeID(tc.r) || e.TaskID != tc.r.TaskID {
					t.Errorf("%s: episode %q task %q", e.ExampleID, e.EpisodeID, e.TaskID)
				}
				if !slices.EqualFunc(e.Messages, tc.msgs[i], msgEqual) {
					t.Errorf("%s: messages\n got  %+v\n want %+v", e.ExampleID, e.Messages, tc.msgs[i])
				}
				if !slices.Equal(e.TrainMask, tc.masks[i]) {
					t.Errorf("%s: mask %v, want %v", e.ExampleID, e.TrainMask, tc.masks[i])
				}
			}
		})
	}
}

func TestExamplesBadTrace(t *testing.T) {
	cases := []struct {
		name string
		edit func(*schemas.Rollout)
		want string
	}{
		{"context is not JSON", func(r *schemas.Rollout) { r.Trace[1].Action = "[{" }, "not a JSON list of messages"},
		{"context is empty", func(r *schemas.Rollout) { r.Trace[1].Action = "[]" }, "empty message list"},
		{"a reply is missing", func(r *schemas.Rollout) { r.Messages = r.Messages[:6] }, "3 model calls but the transcript has 2 assistant messages"},
		{"context of a turn without a call", func(r *schemas.Rollout) { r.Trace[4].Turn = 9 }, "no model call has that turn"},
		{"two contexts for one turn", func(r *schemas.Rollout) { r.Trace[4].Turn = 1 }, "second context event for turn 1"},
		{"two calls with one turn", func(r *schemas.Rollout) { r.Trace[7].Turn = 2 }, "two model calls at turn 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := contextRollout(t)
			tc.edit(&r)
			if _, err := Examples(r); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// Through the stage, a context episode next to a plain one, and a bad
// trace whose error names the file and the row.
func TestFilterContextEvents(t *testing.T) {
	s := openStore(t, "mem://")
	commitSource(t, s, source{files: [][]schemas.Rollout{{ro("t1", 0, 1, ""), contextRollout(t)}}})
	res, err := runFilter(s, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"t1/0@r001-w01", "c1/0@r001-w01#1", "c1/0@r001-w01#2", "c1/0@r001-w01#3"}
	if got := exampleIDs(readSFT(t, s, res.Manifest)); !slices.Equal(got, want) {
		t.Fatalf("examples %v, want %v", got, want)
	}
	if res.Manifest.Summary["accepted"] != 2.0 || res.Manifest.Summary["examples"] != 4.0 {
		t.Fatalf("summary %v", res.Manifest.Summary)
	}

	s = openStore(t, "mem://")
	bad := contextRollout(t)
	bad.Trace[1].Action = "not json"
	commitSource(t, s, source{files: [][]schemas.Rollout{{ro("t1", 0, 1, ""), ro("t1", 1, 0, ""), bad}}})
	_, err = runFilter(s, nil, 1)
	for _, w := range []string{"rollouts-00000-of-00001", "row 2 (task \"c1\", sample 0)", "trace event 1"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("err = %v, want it to mention %q", err, w)
		}
	}
}

// A rollout with no assistant message carries no loss: it is accepted but
// gives no example.
func TestFilterEmptyExample(t *testing.T) {
	s := openStore(t, "mem://")
	r := ro("t1", 0, 1, "")
	r.Messages = r.Messages[:2]
	r.Trace = nil
	commitSource(t, s, source{files: [][]schemas.Rollout{{r, ro("t2", 0, 1, "")}}})
	res, err := runFilter(s, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	sum := res.Manifest.Summary
	if sum["accepted"] != 2.0 || sum["examples"] != 1.0 || sum["empty_examples"] != 1.0 || res.Manifest.Rows("sft") != 1 {
		t.Fatalf("summary %v, sft rows %d", sum, res.Manifest.Rows("sft"))
	}
}

func TestFilterEmpty(t *testing.T) {
	cases := []struct {
		name  string
		files [][]schemas.Rollout
		tasks float64
	}{
		{"all rejected", [][]schemas.Rollout{{ro("t1", 0, 0, ""), ro("t1", 1, 1, "env: down")}}, 1},
		{"no episodes", [][]schemas.Rollout{{}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, "mem://")
			commitSource(t, s, source{files: tc.files})
			res, err := runFilter(s, nil, 1)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Manifest
			if !res.Committed || len(m.Table("sft")) != 1 || m.Rows("sft") != 0 {
				t.Fatalf("sft table: %+v", m.Table("sft"))
			}
			if exs := readSFT(t, s, m); len(exs) != 0 {
				t.Fatalf("examples %v", exs)
			}
			if m.Summary["accepted"] != 0.0 || m.Summary["acceptance_rate"] != 0.0 || m.Summary["tasks"] != tc.tasks {
				t.Fatalf("summary %v", m.Summary)
			}
		})
	}
}

func TestFilterBadInput(t *testing.T) {
	cases := []struct {
		name  string
		src   source
		cfg   any
		want  []string
		match error
	}{
		{"a tasks table written as rollouts", source{write: func(ctx context.Context, x *stages.Exec) error {
			return writeTable(ctx, x, "rollouts.parquet", schemas.Tasks, []schemas.Task{{ID: "t1"}})
		}}, nil, []string{"rollouts file runs/exp/stages/r001-w01-rollout/rollouts-00000-of-00001."}, schemas.ErrSchemaMismatch},
		{"not a rollout stage", source{write: func(ctx context.Context, x *stages.Exec) error {
			return writeTable(ctx, x, "tasks.parquet", schemas.Tasks, []schemas.Task{{ID: "t1"}})
		}}, nil, []string{"has no rollouts table", "tasks"}, nil},
		{"NaN reward", source{write: func(ctx context.Context, x *stages.Exec) error {
			r := ro("t9", 3, 0, "")
			r.Reward = nan()
			return writeTable(ctx, x, "rollouts.parquet", schemas.Rollouts, []schemas.Rollout{ro("t1", 0, 1, ""), r})
		}}, nil, []string{"rollouts-00000-of-00001", "row 1 (task \"t9\", sample 3)", "NaN"}, nil},
		{"misspelt config key", source{files: twoFiles()}, map[string]any{"treshold": 0.7}, []string{`unknown config key "treshold"`}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, "mem://")
			commitSource(t, s, tc.src)
			_, err := runFilter(s, tc.cfg, 1)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to mention %q", err, w)
				}
			}
			if tc.match != nil && !errors.Is(err, tc.match) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.match)
			}
		})
	}
}

func nan() float64 { var z float64; return z / z }

// Shards split tasks by hash: together they give what one shard gives.
func TestFilterShards(t *testing.T) {
	var files [][]schemas.Rollout
	rewards := []float64{0, 0.25, 0.75, 1}
	for f := range 3 {
		var rows []schemas.Rollout
		for task := range 20 {
			for sample := range 4 {
				errText := ""
				if (task+sample+f)%7 == 0 {
					errText = "hook: too many steps"
				}
				rows = append(rows, ro(fmt.Sprintf("f%d-t%02d", f, task), int32(sample), rewards[(task*sample+f)%4], errText))
			}
		}
		files = append(files, rows)
	}
	one := openStore(t, "mem://")
	commitSource(t, one, source{files: files})
	ref, err := runFilter(one, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	three := openStore(t, "mem://")
	commitSource(t, three, source{files: files})
	res, err := runFilter(three, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CommittedHere || len(res.Manifest.Table("sft")) != 3 {
		t.Fatalf("sharded: %+v", res)
	}
	if !maps.Equal(res.Manifest.Summary, ref.Manifest.Summary) {
		t.Fatalf("merged summary\n got  %v\n want %v", res.Manifest.Summary, ref.Manifest.Summary)
	}
	if ref.Manifest.Summary["accepted"] == 0.0 || ref.Manifest.Summary["failed"] == 0.0 {
		t.Fatalf("fixture accepts or fails nothing: %v", ref.Manifest.Summary)
	}
	got, want := exampleIDs(readSFT(t, three, res.Manifest)), exampleIDs(readSFT(t, one, ref.Manifest))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("sharded examples %v, want %v", got, want)
	}
	if a, b := readAcceptance(t, three, res.Manifest), readAcceptance(t, one, ref.Manifest); !maps.Equal(a, b) || len(a) != 60 {
		t.Fatalf("sharded acceptance %v, want %v", a, b)
	}
}

func TestMergeSummaries(t *testing.T) {
	parts := []map[string]any{
		{"episodes": 4.0, "accepted": 1.0, "acceptance_rate": 0.25, "failed": 1.0, "mean_reward": 0.5, "reward_sum": 2.0,
			"accepted_tokens": 10.0, "tasks": 1.0, "tasks_accepted": 1.0, "examples": 1.0, "empty_examples": 0.0},
		{"episodes": 0.0, "accepted": 0.0, "acceptance_rate": 0.0, "failed": 0.0, "mean_reward": 0.0, "reward_sum": 0.0,
			"accepted_tokens": 0.0, "tasks": 0.0, "tasks_accepted": 0.0, "examples": 0.0, "empty_examples": 0.0},
		{"episodes": 4.0, "accepted": 3.0, "acceptance_rate": 0.75, "failed": 0.0, "mean_reward": 0.75, "reward_sum": 3.0,
			"accepted_tokens": 30.0, "tasks": 2.0, "tasks_accepted": 1.0, "examples": 4.0, "empty_examples": 1.0},
	}
	got, err := Stage{}.MergeSummaries(parts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"episodes": 8.0, "accepted": 4.0, "acceptance_rate": 0.5, "failed": 1.0, "mean_reward": 5.0 / 8,
		"reward_sum": 5.0, "accepted_tokens": 40.0, "tasks": 3.0, "tasks_accepted": 2.0, "examples": 5.0, "empty_examples": 1.0}
	if !maps.Equal(got, want) {
		t.Fatalf("merged\n got  %v\n want %v", got, want)
	}
	if _, err := (Stage{}).MergeSummaries([]map[string]any{{"rows": 3.0}}); err == nil || !strings.Contains(err.Error(), "shard 0") {
		t.Fatalf("a foreign summary: %v", err)
	}
}
