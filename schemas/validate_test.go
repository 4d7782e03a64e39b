package schemas

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pq "github.com/parquet-go/parquet-go"
)

// Foreign row types: files as other tools or older code might write them.
type taskAnswersString struct {
	ID       string `parquet:"id"`
	Domain   string `parquet:"domain"`
	Split    string `parquet:"split"`
	Question string `parquet:"question"`
	Answers  string `parquet:"answers"`
	Meta     string `parquet:"meta"`
}

type taskNoMetaExtra struct {
	Extra    int64    `parquet:"extra"`
	Question string   `parquet:"question"`
	ID       string   `parquet:"id"`
	Domain   string   `parquet:"domain"`
	Split    string   `parquet:"split"`
	Answers  []string `parquet:"answers,list"`
}

type taskBinaryQuestion struct {
	ID       string   `parquet:"id"`
	Domain   string   `parquet:"domain"`
	Split    string   `parquet:"split"`
	Question []byte   `parquet:"question"`
	Answers  []string `parquet:"answers,list"`
	Meta     string   `parquet:"meta"`
}

type evalWide struct {
	Source     string  `parquet:"source"`
	HarnessID  string  `parquet:"harness_id"`
	ModelID    string  `parquet:"model_id"`
	TaskID     string  `parquet:"task_id"`
	K          int64   `parquet:"k"`
	MeanReward float32 `parquet:"mean_reward"`
	PassAtK    float64 `parquet:"pass_at_k"`
	MeanTurns  float64 `parquet:"mean_turns"`
	MeanTokens float64 `parquet:"mean_tokens"`
}

func foreignFile[T any](t *testing.T, rows []T, meta ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pq.NewGenericWriter[T](&buf)
	for i := 0; i+1 < len(meta); i += 2 {
		w.SetKeyValueMetadata(meta[i], meta[i+1])
	}
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pyarrowLikeTasks writes a tasks file the way pyarrow or polars do: every
// column nullable, large strings, a stored ARROW:schema, nulls present.
func pyarrowLikeTasks(t *testing.T) []byte {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "data_source", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "id", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		{Name: "domain", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "split", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "question", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		{Name: "answers", Type: arrow.LargeListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "meta", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues([]string{"nq", "nq"}, nil)
	b.Field(1).(*array.LargeStringBuilder).AppendValues([]string{"a", "b"}, nil)
	b.Field(2).(*array.StringBuilder).AppendValues([]string{"searchqa", "searchqa"}, nil)
	b.Field(3).(*array.StringBuilder).AppendValues([]string{"train", ""}, []bool{true, false})
	b.Field(4).(*array.LargeStringBuilder).AppendValues([]string{"who?", "when?"}, nil)
	lb := b.Field(5).(*array.LargeListBuilder)
	vb := lb.ValueBuilder().(*array.StringBuilder)
	lb.Append(true)
	vb.AppendValues([]string{"x", "y"}, nil)
	lb.AppendNull()
	b.Field(6).(*array.StringBuilder).AppendValues([]string{"{}", ""}, []bool{true, false})
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestValidateFiles(t *testing.T) {
	tasks := sampleTasks(3)
	tests := []struct {
		name    string
		data    func(t *testing.T) []byte
		table   Table
		wantErr error
		want    []string // substrings of the error
	}{
		{"own file", func(t *testing.T) []byte { return writeFile(t, Tasks, WriterOptions{}, tasks) }, Tasks, nil, nil},
		{"pyarrow-like nullable large types", pyarrowLikeTasks, Tasks, nil, nil},
		{"list stored as string", func(t *testing.T) []byte {
			return foreignFile(t, []taskAnswersString{{ID: "a", Answers: "x"}})
		}, Tasks, ErrSchemaMismatch, []string{`column "answers": expected list<string>, found string`}},
		{"missing column, extra allowed", func(t *testing.T) []byte {
			return foreignFile(t, []taskNoMetaExtra{{ID: "a"}})
		}, Tasks, ErrSchemaMismatch, []string{`column "meta": missing (expected string)`}},
		{"binary is not string", func(t *testing.T) []byte {
			return foreignFile(t, []taskBinaryQuestion{{ID: "a", Question: []byte("q")}})
		}, Tasks, ErrSchemaMismatch, []string{`column "question": expected string, found binary`}},
		{"wider integers and narrower floats", func(t *testing.T) []byte {
			return foreignFile(t, []evalWide{{K: 8}})
		}, Evals, nil, nil},
		{"every problem listed", func(t *testing.T) []byte {
			return foreignFile(t, []evalWide{{K: 8}})
		}, Tasks, ErrSchemaMismatch, []string{`column "id": missing`, `column "answers": missing (expected list<string>)`, `column "meta": missing`}},
		{"other table", func(t *testing.T) []byte { return writeFile(t, Tasks, WriterOptions{}, tasks) },
			Rollouts, ErrSchemaMismatch, []string{`file holds table "tasks", expected "rollouts"`}},
		{"newer version", func(t *testing.T) []byte {
			return foreignFile(t, tasks, MetaTable, "tasks", MetaSchemaVersion, "2")
		}, Tasks, ErrNewerSchema, []string{"tasks schema version 2", "up to version 1", "upgrade whale"}},
		{"older version", func(t *testing.T) []byte {
			return foreignFile(t, []Candidate{{Name: "x"}}, MetaTable, "candidates", MetaSchemaVersion, "1")
		}, Candidates, nil, nil},
		{"bad version", func(t *testing.T) []byte {
			return foreignFile(t, tasks, MetaSchemaVersion, "v2")
		}, Tasks, nil, []string{`whale.schema_version: "v2" is not a schema version`}},
		{"not parquet", func(*testing.T) []byte { return []byte("id,question\n1,what\n") }, Tasks, nil, []string{"open parquet file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.data(t)
			err := Validate(bytes.NewReader(data), int64(len(data)), tc.table)
			if tc.wantErr == nil && tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted the file")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v is not %v", err, tc.wantErr)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestValidateSchemaNested(t *testing.T) {
	replace := func(name string, typ arrow.DataType) *arrow.Schema {
		fs := Rollouts.Arrow.Fields()
		for i := range fs {
			if fs[i].Name == name {
				fs[i].Type = typ
			}
		}
		return arrow.NewSchema(fs, nil)
	}
	noContent := arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "name", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "tool_call_id", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "tool_calls", Type: arrow.ListOf(toolCallType)},
	))
	turnAsString := arrow.LargeListOf(arrow.StructOf(
		arrow.Field{Name: "feedback", Type: arrow.BinaryTypes.StringView},
		arrow.Field{Name: "action", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "kind", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "turn", Type: arrow.BinaryTypes.String},
	))
	tests := []struct {
		name string
		got  *arrow.Schema
		want string // "" means valid
	}{
		{"identical", Rollouts.Arrow, ""},
		{"message field missing", replace("messages", noContent), `column "messages[].content": missing (expected string)`},
		{"trace turn mistyped", replace("trace", turnAsString), `column "trace[].turn": expected int32, found string`},
		{"bool as int", replace("correct", arrow.PrimitiveTypes.Int8), `column "correct": expected bool, found int8`},
		{"int as float", replace("turns", arrow.PrimitiveTypes.Float64), `column "turns": expected int32, found double`},
		{"wider and nullable", replace("sample", arrow.PrimitiveTypes.Int64), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateSchema(tc.got, Rollouts)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ValidateSchema: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			case tc.want != "" && !errors.Is(err, ErrSchemaMismatch):
				t.Fatalf("err %v is not ErrSchemaMismatch", err)
			}
		})
	}
}

func TestReadRowsForeignFiles(t *testing.T) {
	data := pyarrowLikeTasks(t)
	got := readAll[Task](t, data)
	want := []Task{
		{ID: "a", Domain: "searchqa", Split: "train", Question: "who?", Answers: []string{"x", "y"}, Meta: "{}"},
		{ID: "b", Domain: "searchqa", Question: "when?", Answers: []string{}},
	}
	if len(got) != len(want) {
		t.Fatalf("read %d rows", len(got))
	}
	for i := range want {
		if !equalTask(got[i], want[i]) {
			t.Errorf("row %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	evals := readAll[Eval](t, foreignFile(t, []evalWide{{HarnessID: "h", K: 8, MeanReward: 0.5}}))
	if len(evals) != 1 || evals[0].K != 8 || evals[0].MeanReward != 0.5 || evals[0].HarnessID != "h" {
		t.Errorf("evals = %+v", evals)
	}

	bad := foreignFile(t, []taskAnswersString{{ID: "a"}})
	err := ReadRows(context.Background(), bytes.NewReader(bad), int64(len(bad)), func(Task) error { return nil })
	if !errors.Is(err, ErrSchemaMismatch) {
		t.Errorf("typed read of a mistyped file: err = %v", err)
	}
}

func equalTask(a, b Task) bool {
	return a.ID == b.ID && a.Domain == b.Domain && a.Split == b.Split && a.Question == b.Question &&
		a.Meta == b.Meta && strings.Join(a.Answers, "\x00") == strings.Join(b.Answers, "\x00") && len(a.Answers) == len(b.Answers)
}
