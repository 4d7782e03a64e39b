package importers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/whalerun/whale/schemas"
)

var (
	chatType = arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.String, Nullable: true},
	))
	// Search-R1: ground_truth is {target: [answers]}.
	searchR1Schema = arrow.NewSchema([]arrow.Field{
		{Name: "data_source", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "prompt", Type: chatType, Nullable: true},
		{Name: "ability", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "reward_model", Type: arrow.StructOf(
			arrow.Field{Name: "ground_truth", Type: arrow.StructOf(
				arrow.Field{Name: "target", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
			), Nullable: true},
			arrow.Field{Name: "style", Type: arrow.BinaryTypes.String, Nullable: true},
		), Nullable: true},
		{Name: "extra_info", Type: arrow.StructOf(
			arrow.Field{Name: "index", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
			arrow.Field{Name: "split", Type: arrow.BinaryTypes.String, Nullable: true},
		), Nullable: true},
		{Name: "golden_answers", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	// DAPO-Math: ground_truth is a string; extra_info has a uuid index and
	// the raw question.
	dapoSchema = arrow.NewSchema([]arrow.Field{
		{Name: "data_source", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "prompt", Type: chatType, Nullable: true},
		{Name: "reward_model", Type: arrow.StructOf(
			arrow.Field{Name: "style", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "ground_truth", Type: arrow.BinaryTypes.String, Nullable: true},
		), Nullable: true},
		{Name: "extra_info", Type: arrow.StructOf(
			arrow.Field{Name: "index", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "question", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64), Nullable: true},
		), Nullable: true},
	}, nil)
)

const searchR1Rows = `[
{"data_source": "nq", "prompt": [{"role": "user", "content": "Answer the given question. Question: who sings i will always love you?"}], "ability": "fact-reasoning",
 "reward_model": {"ground_truth": {"target": ["Dolly Parton", "Whitney Houston"]}, "style": "rule"}, "extra_info": {"index": 0, "split": "test"}, "golden_answers": ["Dolly Parton"]},
{"data_source": "hotpotqa", "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "Question: which magazine was started first?"}], "ability": "fact-reasoning",
 "reward_model": {"ground_truth": {"target": ["Arthur's Magazine"]}, "style": "rule"}, "extra_info": {"index": 0, "split": "test"}, "golden_answers": ["x"]},
{"data_source": "nq", "prompt": [{"role": "user", "content": "Question: when was the eiffel tower built?"}], "ability": null,
 "reward_model": {"ground_truth": {"target": ["1889"]}, "style": "rule"}, "extra_info": null, "golden_answers": null}
]`

const dapoRows = `[
{"data_source": "math_dapo", "prompt": [{"role": "user", "content": "Solve the following math problem step by step.\n\nWhat is 2+2?\n\nRemember to put your answer on its own line after \"Answer:\"."}],
 "reward_model": {"style": "rule-lighteval/MATH_v2", "ground_truth": "4"}, "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079", "question": "What is 2+2?", "scores": [0.5, 1]}},
{"data_source": "math_dapo", "prompt": [{"role": "user", "content": "What is 3*3?"}],
 "reward_model": {"style": "rule", "ground_truth": "9"}, "extra_info": {"index": "b7", "question": "", "scores": []}}
]`

// writeParquet writes the JSON rows as Parquet, rowsPerGroup rows to a row
// group, like verl's datasets.to_parquet would.
func writeParquet(t testing.TB, sc *arrow.Schema, rowsJSON string, rowsPerGroup int64) []byte {
	t.Helper()
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(rowsJSON))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	defer rec.Release()
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithMaxRowGroupLength(rowsPerGroup))
	w, err := pqarrow.NewFileWriter(sc, &buf, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func importVerl(data []byte, name string, opts Options) ([]schemas.Task, error) {
	var got []schemas.Task
	err := VerlParquet(context.Background(), bytes.NewReader(data), int64(len(data)), name, opts, func(task schemas.Task) error {
		if msg := invariant(task); msg != "" {
			return errors.New(msg)
		}
		got = append(got, task)
		return nil
	})
	return got, err
}

func TestVerlSearchR1(t *testing.T) {
	// Two rows per row group: row numbers must continue across groups.
	data := writeParquet(t, searchR1Schema, searchR1Rows, 2)
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if pf.NumRowGroups() != 2 {
		t.Fatalf("fixture has %d row groups, want 2", pf.NumRowGroups())
	}
	got, err := importVerl(data, "test.parquet", Options{Split: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	want := []schemas.Task{
		{ID: "nq-test-0", Domain: "searchqa", Split: "test", Question: "Answer the given question. Question: who sings i will always love you?",
			Answers: []string{"Dolly Parton", "Whitney Houston"}},
		{ID: "hotpotqa-test-0", Domain: "searchqa", Split: "test", Question: "Question: which magazine was started first?",
			Answers: []string{"Arthur's Magazine"}},
		{ID: "nq-dev-2", Domain: "searchqa", Split: "dev", Question: "Question: when was the eiffel tower built?",
			Answers: []string{"1889"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d tasks", len(got))
	}
	for i := range want {
		g := got[i]
		g.Meta = ""
		if !reflect.DeepEqual(g, want[i]) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, g, want[i])
		}
	}
	m := metaOf(t, got[1])
	wantMeta := map[string]any{
		"data_source": "hotpotqa", "ability": "fact-reasoning", "style": "rule",
		"extra_info": map[string]any{"index": 0.0, "split": "test"},
		"prompt": []any{
			map[string]any{"role": "system", "content": "s"},
			map[string]any{"role": "user", "content": "Question: which magazine was started first?"},
		},
	}
	if !reflect.DeepEqual(m, wantMeta) {
		t.Errorf("meta\n got %v\nwant %v", m, wantMeta)
	}
	if m := metaOf(t, got[2]); m["extra_info"] != nil || m["ability"] != nil {
		t.Errorf("null extra_info/ability should be absent: %s", got[2].Meta)
	}
}

func TestVerlDAPO(t *testing.T) {
	data := writeParquet(t, dapoSchema, dapoRows, 1000)
	got, err := importVerl(data, "dapo.parquet", Options{Split: "train"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d tasks", len(got))
	}
	// extra_info.question is the raw question, preferred over the template.
	if got[0].Question != "What is 2+2?" || got[0].ID != "math_dapo-train-9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079" ||
		got[0].Domain != "math" || !reflect.DeepEqual(got[0].Answers, []string{"4"}) {
		t.Errorf("row 0: %+v", got[0])
	}
	// An empty extra_info.question falls back to the last user message.
	if got[1].Question != "What is 3*3?" || got[1].ID != "math_dapo-train-b7" {
		t.Errorf("row 1: %+v", got[1])
	}
	if m := metaOf(t, got[0]); !reflect.DeepEqual(m["extra_info"].(map[string]any)["scores"], []any{0.5, 1.0}) {
		t.Errorf("meta: %s", got[0].Meta)
	}
	// Options.Domain wins over the inferred one.
	got, err = importVerl(data, "dapo.parquet", Options{Domain: "demo"})
	if err != nil || got[0].Domain != "demo" {
		t.Errorf("domain override: %v %+v", err, got)
	}
}

func TestVerlGroundTruthList(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "data_source", Type: arrow.BinaryTypes.LargeString},
		{Name: "prompt", Type: arrow.BinaryTypes.String},
		{Name: "reward_model", Type: arrow.StructOf(arrow.Field{Name: "ground_truth", Type: arrow.ListOf(arrow.BinaryTypes.String)})},
	}, nil)
	data := writeParquet(t, sc, `[{"data_source": "lichess_puzzles", "prompt": "FEN ...", "reward_model": {"ground_truth": ["e2e4 e7e5"]}}]`, 10)
	got, err := importVerl(data, "c.parquet", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].ID != "lichess_puzzles-0" || got[0].Domain != "chess" || got[0].Question != "FEN ..." || got[0].Answers[0] != "e2e4 e7e5" {
		t.Errorf("%+v", got[0])
	}
}

func TestVerlBadInput(t *testing.T) {
	str := arrow.BinaryTypes.String
	rm := arrow.StructOf(arrow.Field{Name: "ground_truth", Type: str, Nullable: true})
	schema := func(fields ...arrow.Field) *arrow.Schema { return arrow.NewSchema(fields, nil) }
	tests := []struct {
		name  string
		sc    *arrow.Schema
		rows  string
		opts  Options
		wants []string
	}{
		{"missing column", schema(arrow.Field{Name: "data_source", Type: str}, arrow.Field{Name: "prompt", Type: chatType}),
			`[{"data_source": "nq", "prompt": [{"role": "user", "content": "q"}]}]`, Options{},
			[]string{`train.parquet: missing column "reward_model" (expected struct with ground_truth: string, list<string> or struct<target: list<string>>)`}},
		{"prompt mistyped", schema(arrow.Field{Name: "data_source", Type: str}, arrow.Field{Name: "prompt", Type: arrow.PrimitiveTypes.Int64}, arrow.Field{Name: "reward_model", Type: rm}),
			`[{"data_source": "nq", "prompt": 3, "reward_model": {"ground_truth": "a"}}]`, Options{},
			[]string{`train.parquet: column "prompt" has type int64, expected list<struct<role: string, content: string>> or string`}},
		{"reward_model without ground_truth", schema(arrow.Field{Name: "data_source", Type: str}, arrow.Field{Name: "prompt", Type: str},
			arrow.Field{Name: "reward_model", Type: arrow.StructOf(arrow.Field{Name: "answer", Type: str})}),
			`[{"data_source": "nq", "prompt": "q", "reward_model": {"answer": "a"}}]`, Options{},
			[]string{`train.parquet: column "reward_model" has type struct<answer: utf8>, expected struct with ground_truth`}},
		{"extra_info mistyped", schema(arrow.Field{Name: "data_source", Type: str}, arrow.Field{Name: "prompt", Type: str},
			arrow.Field{Name: "reward_model", Type: rm}, arrow.Field{Name: "extra_info", Type: str}),
			`[{"data_source": "nq", "prompt": "q", "reward_model": {"ground_truth": "a"}, "extra_info": "{}"}]`, Options{},
			[]string{`train.parquet: column "extra_info" has type utf8, expected struct`}},
		{"null ground truth at row 3", schema(arrow.Field{Name: "data_source", Type: str}, arrow.Field{Name: "prompt", Type: str}, arrow.Field{Name: "reward_model", Type: rm}),
			`[{"data_source": "nq", "prompt": "q", "reward_model": {"ground_truth": "a"}},
			  {"data_source": "nq", "prompt": "q", "reward_model": {"ground_truth": "a"}},
			  {"data_source": "nq", "prompt": "q", "reward_model": {"ground_truth": "a"}},
			  {"data_source": "nq", "prompt": "q", "reward_model": {"ground_truth": null}}]`, Options{},
			[]string{`train.parquet: row 3: column reward_model.ground_truth: is null`}},
		{"no user message", schema(arrow.Field{Name: "data_source", Type: str}, arrow.Field{Name: "prompt", Type: chatType}, arrow.Field{Name: "reward_model", Type: rm}),
			`[{"data_source": "nq", "prompt": [{"role": "system", "content": "s"}], "reward_model": {"ground_truth": "a"}}]`, Options{},
			[]string{`train.parquet: row 0: column prompt: has no user message with content`}},
		{"unknown data source", schema(arrow.Field{Name: "data_source", Type: str}, arrow.Field{Name: "prompt", Type: str}, arrow.Field{Name: "reward_model", Type: rm}),
			`[{"data_source": "my_set", "prompt": "q", "reward_model": {"ground_truth": "a"}}]`, Options{},
			[]string{`train.parquet: row 0: column data_source: cannot tell the domain of data source "my_set"; pass the domain`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := writeParquet(t, tt.sc, tt.rows, 2)
			_, err := importVerl(data, "train.parquet", tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	_, err := importVerl([]byte("PAR1 this is not parquet"), "x.parquet", Options{})
	if err == nil || !strings.Contains(err.Error(), "x.parquet: not a readable Parquet file") {
		t.Errorf("garbage: %v", err)
	}
}

func TestVerlCallbackErrorNamesRow(t *testing.T) {
	data := writeParquet(t, searchR1Schema, searchR1Rows, 2)
	stop := errors.New("stop")
	n := 0
	err := VerlParquet(context.Background(), bytes.NewReader(data), int64(len(data)), "t.parquet", Options{}, func(schemas.Task) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "t.parquet: row 2: task not accepted") {
		t.Errorf("err = %v", err)
	}
}

func BenchmarkVerlParquet(b *testing.B) {
	var rows strings.Builder
	rows.WriteString("[")
	const n = 20000
	for i := range n {
		if i > 0 {
			rows.WriteString(",")
		}
		fmt.Fprintf(&rows, `{"data_source": "nq", "prompt": [{"role": "user", "content": "Question: what is item %d?"}], "ability": "qa", "reward_model": {"ground_truth": {"target": ["a%d", "b"]}, "style": "rule"}, "extra_info": {"index": %d, "split": "train"}}`, i, i, i)
	}
	rows.WriteString("]")
	data := writeParquet(b, searchR1Schema, rows.String(), 5000)
	path := filepath.Join(b.TempDir(), "bench.parquet")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := ImportFile(context.Background(), path, FormatUnknown, Options{}, func(schemas.Task) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tasks/s")
}
