package schemas

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
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
