package schemas

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// The rollouts and sft layouts of schema version 1, before messages had
// a reasoning field: files written by the previous whale.
type messageV1 struct {
	Role       string     `parquet:"role"`
	Content    string     `parquet:"content"`
	Name       string     `parquet:"name"`
	ToolCallID string     `parquet:"tool_call_id"`
	ToolCalls  []ToolCall `parquet:"tool_calls,list"`
}

type sftV1 struct {
	ExampleID string      `parquet:"example_id"`
	EpisodeID string      `parquet:"episode_id"`
	TaskID    string      `parquet:"task_id"`
	Messages  []messageV1 `parquet:"messages,list"`
	TrainMask []bool      `parquet:"train_mask,list"`
}

type rolloutV1 struct {
	Run              string       `parquet:"run"`
	Position         string       `parquet:"position"`
	ModelID          string       `parquet:"model_id"`
	HarnessID        string       `parquet:"harness_id"`
	TaskID           string       `parquet:"task_id"`
	Sample           int32        `parquet:"sample"`
	Seed             int64        `parquet:"seed"`
	Reward           float64      `parquet:"reward"`
	Correct          bool         `parquet:"correct"`
	Answer           string       `parquet:"answer"`
	FinishReason     string       `parquet:"finish_reason"`
	Error            string       `parquet:"error"`
	Turns            int32        `parquet:"turns"`
	PromptTokens     int64        `parquet:"prompt_tokens"`
	CompletionTokens int64        `parquet:"completion_tokens"`
	LatencyMS        int64        `parquet:"latency_ms"`
	Messages         []messageV1  `parquet:"messages,list"`
	Trace            []TraceEvent `parquet:"trace,list"`
}

func TestVersion1FilesStillRead(t *testing.T) {
	ctx := context.Background()
	msgs := []messageV1{{Role: "user", Content: "q"}, {Role: "assistant", Content: "<answer>x</answer>", ToolCalls: []ToolCall{{ID: "c1", Name: "search", Arguments: "{}"}}}}

	data := foreignFile(t, []rolloutV1{{Run: "r", TaskID: "t1", Reward: 1, Messages: msgs}}, MetaTable, "rollouts", MetaSchemaVersion, "1")
	rows := readAll[Rollout](t, data)
	if len(rows) != 1 || rows[0].TaskID != "t1" || len(rows[0].Messages) != 2 || rows[0].Messages[1].Content != "<answer>x</answer>" ||
		rows[0].Messages[1].Reasoning != "" || len(rows[0].Messages[1].ToolCalls) != 1 {
		t.Fatalf("v1 rollouts read as %+v", rows)
	}
	if r := rows[0]; r.Tools != "" || r.Schedule != "" || r.Round != 0 || r.Section != "" || r.Stage != "" {
		t.Fatalf("columns a v1 file lacks read as %+v", r)
	}
	var n int64
	err := ReadColumns(ctx, bytes.NewReader(data), int64(len(data)), []string{"reward", "messages"}, func(rec arrow.RecordBatch) error {
		n += rec.NumRows()
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("columns of a v1 rollouts file: %d rows, %v", n, err)
	}

	data = foreignFile(t, []sftV1{{ExampleID: "e", Messages: msgs, TrainMask: []bool{false, true}}}, MetaTable, "sft", MetaSchemaVersion, "1")
	sft := readAll[SFTExample](t, data)
	if len(sft) != 1 || len(sft[0].Messages) != 2 || sft[0].Messages[0].Reasoning != "" || !sft[0].TrainMask[1] {
		t.Fatalf("v1 sft read as %+v", sft)
	}
}

func TestReasoningRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter[SFTExample](&buf, SFT, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := SFTExample{ExampleID: "e", Messages: []Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a", Reasoning: "think first"}}, TrainMask: []bool{false, true}}
	if err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readAll[SFTExample](t, buf.Bytes())
	if len(got) != 1 || got[0].Messages[1].Reasoning != "think first" || got[0].Messages[0].Reasoning != "" {
		t.Fatalf("read back %+v", got)
	}
}

// rolloutV2 is the rollouts layout of schema version 2: version 1 with
// reasoning, token ids and tools, before the columns that say where an
// episode ran.
type rolloutV2 struct {
	Run              string       `parquet:"run"`
	Position         string       `parquet:"position"`
	ModelID          string       `parquet:"model_id"`
	HarnessID        string       `parquet:"harness_id"`
	TaskID           string       `parquet:"task_id"`
	Sample           int32        `parquet:"sample"`
	Seed             int64        `parquet:"seed"`
	Reward           float64      `parquet:"reward"`
	Correct          bool         `parquet:"correct"`
	Answer           string       `parquet:"answer"`
	FinishReason     string       `parquet:"finish_reason"`
	Error            string       `parquet:"error"`
	Turns            int32        `parquet:"turns"`
	PromptTokens     int64        `parquet:"prompt_tokens"`
	CompletionTokens int64        `parquet:"completion_tokens"`
	LatencyMS        int64        `parquet:"latency_ms"`
	Messages         []Message    `parquet:"messages,list"`
	Trace            []TraceEvent `parquet:"trace,list"`
	Tools            string       `parquet:"tools"`
}

func TestVersion2RolloutsStillRead(t *testing.T) {
	ctx := context.Background()
	msgs := []Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a", Reasoning: "hmm", TokenIDs: []int32{1, 2}}}
	data := foreignFile(t, []rolloutV2{{Run: "r", Position: "r002-h01", TaskID: "t1", Reward: 1, Messages: msgs, Tools: "[]"}},
		MetaTable, "rollouts", MetaSchemaVersion, "2")
	if err := Validate(bytes.NewReader(data), int64(len(data)), Rollouts); err != nil {
		t.Fatalf("a v2 rollouts file does not validate: %v", err)
	}
	rows := readAll[Rollout](t, data)
	if len(rows) != 1 || rows[0].Position != "r002-h01" || rows[0].Tools != "[]" || rows[0].Messages[1].Reasoning != "hmm" {
		t.Fatalf("v2 rollouts read as %+v", rows)
	}
	if r := rows[0]; r.Schedule != "" || r.Round != 0 || r.Section != "" || r.Stage != "" {
		t.Fatalf("the columns version 3 added read as %+v from a v2 file", r)
	}
	// The scores' columns read as they did; the new ones are not there to
	// ask for.
	var n int64
	err := ReadColumns(ctx, bytes.NewReader(data), int64(len(data)), []string{"task_id", "reward", "correct"}, func(rec arrow.RecordBatch) error {
		n += rec.NumRows()
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("columns of a v2 rollouts file: %d rows, %v", n, err)
	}
}

// The columns that say where an episode ran round-trip through the typed
// and the column readers.
func TestRolloutPlaceColumns(t *testing.T) {
	in := []Rollout{
		{Run: "r", Position: "r003-w02", TaskID: "t1", Schedule: "whale", Round: 3, Section: "weight", Stage: "rollout"},
		{Run: "r", Position: "r000-t", TaskID: "t2", Schedule: "fst", Round: 0, Section: "test", Stage: "evaluate"},
	}
	data := writeFile(t, Rollouts, WriterOptions{}, in)
	info, err := FileInfo(bytes.NewReader(data), int64(len(data)))
	if err != nil || info.SchemaVersion != 3 {
		t.Fatalf("schema version %d, %v; want 3", info.SchemaVersion, err)
	}
	got := readAll[Rollout](t, data)
	for i := range in {
		g := got[i]
		if g.Schedule != in[i].Schedule || g.Round != in[i].Round || g.Section != in[i].Section || g.Stage != in[i].Stage {
			t.Errorf("row %d read back as %+v", i, g)
		}
	}
	var rounds []int32
	var sections []string
	err = ReadColumns(context.Background(), bytes.NewReader(data), int64(len(data)), []string{"round", "section"}, func(rec arrow.RecordBatch) error {
		for i := range int(rec.NumRows()) {
			rounds = append(rounds, rec.Column(0).(*array.Int32).Value(i))
			sections = append(sections, rec.Column(1).(*array.String).Value(i))
		}
		return nil
	})
	if err != nil || !slices.Equal(rounds, []int32{3, 0}) || !slices.Equal(sections, []string{"weight", "test"}) {
		t.Fatalf("round and section columns: %v %v, %v", rounds, sections, err)
	}
}
