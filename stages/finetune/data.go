package finetune

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// Counts describes an SFT export.
type Counts struct {
	Examples  int64 // rows
	Assistant int64 // assistant messages that carry loss
}

// materializeSFT downloads the sft table's Parquet files into dir as
// part-NNNNN.parquet (checking size and sha256) and writes their rows to
// jsonlPath as chat-messages JSON lines, one file and one row group at a
// time.
func materializeSFT(ctx context.Context, x *stages.Exec, m *storage.Manifest, dir, jsonlPath string) (Counts, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Counts{}, fmt.Errorf("finetune: %w", err)
	}
	files := m.Table(schemas.SFT.Name)
	if len(files) == 0 && len(m.Files) > 0 {
		return Counts{}, fmt.Errorf("finetune: input sft (%s) has no %q table: is it a filter stage?", m.Dir, schemas.SFT.Name)
	}
	out, err := os.Create(jsonlPath)
	if err != nil {
		return Counts{}, fmt.Errorf("finetune: %w", err)
	}
	defer out.Close()
	bw := bufio.NewWriterSize(out, 1<<20)
	var total Counts
	for i, f := range files {
		local := filepath.Join(dir, fmt.Sprintf("part-%05d.parquet", i))
		if err := download(ctx, x, m, f, local); err != nil {
			return Counts{}, err
		}
		c, err := exportFile(ctx, local, m.FileKey(f), bw)
		if err != nil {
			return Counts{}, err
		}
		total.Examples += c.Examples
		total.Assistant += c.Assistant
	}
	if err := bw.Flush(); err != nil {
		return Counts{}, fmt.Errorf("finetune: write %s: %w", jsonlPath, err)
	}
	if err := out.Close(); err != nil {
		return Counts{}, fmt.Errorf("finetune: write %s: %w", jsonlPath, err)
	}
	return total, nil
}

func download(ctx context.Context, x *stages.Exec, m *storage.Manifest, f storage.FileEntry, dst string) error {
	r, err := x.NewReader(ctx, m, f)
	if err != nil {
		return fmt.Errorf("finetune: read %s: %w", m.FileKey(f), err)
	}
	defer r.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("finetune: download %s: %w", m.FileKey(f), err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); n != f.Size || (f.SHA256 != "" && got != f.SHA256) {
		return fmt.Errorf("finetune: %s: got %d bytes %s, the manifest says %d bytes %s", m.FileKey(f), n, got, f.Size, f.SHA256)
	}
	return nil
}

func exportFile(ctx context.Context, local, name string, w io.Writer) (Counts, error) {
	f, err := os.Open(local)
	if err != nil {
		return Counts{}, fmt.Errorf("finetune: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Counts{}, fmt.Errorf("finetune: %w", err)
	}
	c, err := ExportJSONL(ctx, f, fi.Size(), w)
	if err != nil {
		return c, fmt.Errorf("finetune: export %s: %w", name, err)
	}
	return c, nil
}

// JSONLExample is one line of the chat-messages export: the layout TRL's
// SFT datasets, verl's multi-turn SFT and SkyRL read, plus train_mask (one
// entry per message: true where the message carries loss) and the ids.
type JSONLExample struct {
	Messages  []JSONLMessage `json:"messages"`
	TrainMask []bool         `json:"train_mask"`
	ExampleID string         `json:"example_id"`
	EpisodeID string         `json:"episode_id"`
	TaskID    string         `json:"task_id"`
	// Tools is the OpenAI tools array the model was offered, for the chat
	// template's tools argument; absent when there were none.
	Tools json.RawMessage `json:"tools,omitempty"`
}

// JSONLMessage is an OpenAI-style chat message, the form chat templates
// expect (tool calls nest their name and arguments under "function").
type JSONLMessage struct {
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolCalls  []JSONLToolCall `json:"tool_calls,omitempty"`
	// Reasoning is the thinking the server returned apart from the
	// content; the reference trainer renders it as the chat template's
	// reasoning_content.
	Reasoning string `json:"reasoning,omitempty"`
	// TokenIDs and PromptTokenIDs are the server's exact tokens (see
	// schemas.Message); a trainer that has them for every assistant
	// message trains on them instead of rendering the text.
	TokenIDs       []int32 `json:"token_ids,omitempty"`
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitempty"`
}

// JSONLToolCall is one tool call of an assistant message.
type JSONLToolCall struct {
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type"`
	Function JSONLFunction `json:"function"`
}

// JSONLFunction is the called function; Arguments is JSON text.
type JSONLFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ExportJSONL streams an SFT Parquet file (size bytes at ra) to w as JSON
// lines, one row group at a time. A row whose train_mask does not have one
// entry per message, or marks a message that is not the assistant's, is an
// error naming the row: loss belongs on model-written text only.
func ExportJSONL(ctx context.Context, ra io.ReaderAt, size int64, w io.Writer) (Counts, error) {
	var c Counts
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	row := int64(0)
	err := schemas.ReadRows(ctx, ra, size, func(ex schemas.SFTExample) error {
		defer func() { row++ }()
		line, n, err := toJSONL(ex)
		if err != nil {
			return fmt.Errorf("row %d (example_id %q): %w", row, ex.ExampleID, err)
		}
		c.Examples++
		c.Assistant += n
		return enc.Encode(line)
	})
	return c, err
}

func toJSONL(ex schemas.SFTExample) (JSONLExample, int64, error) {
	if len(ex.TrainMask) != len(ex.Messages) {
		return JSONLExample{}, 0, fmt.Errorf("train_mask has %d entries for %d messages", len(ex.TrainMask), len(ex.Messages))
	}
	out := JSONLExample{
		Messages:  make([]JSONLMessage, len(ex.Messages)),
		TrainMask: ex.TrainMask,
		ExampleID: ex.ExampleID,
		EpisodeID: ex.EpisodeID,
		TaskID:    ex.TaskID,
	}
	if ex.Tools != "" {
		if !json.Valid([]byte(ex.Tools)) {
			return JSONLExample{}, 0, fmt.Errorf("tools is not JSON: %.80q", ex.Tools)
		}
		out.Tools = json.RawMessage(ex.Tools)
	}
	var n int64
	for i, m := range ex.Messages {
		if ex.TrainMask[i] {
			if m.Role != "assistant" {
				return JSONLExample{}, 0, fmt.Errorf("message %d: train_mask is true on a %q message; only assistant messages may carry loss", i, m.Role)
			}
			n++
		}
		jm := JSONLMessage{Role: m.Role, Content: m.Content, Name: m.Name, ToolCallID: m.ToolCallID, Reasoning: m.Reasoning,
			TokenIDs: m.TokenIDs, PromptTokenIDs: m.PromptTokenIDs}
		for _, tc := range m.ToolCalls {
			jm.ToolCalls = append(jm.ToolCalls, JSONLToolCall{ID: tc.ID, Type: "function", Function: JSONLFunction{Name: tc.Name, Arguments: tc.Arguments}})
		}
		out.Messages[i] = jm
	}
	return out, n, nil
}
