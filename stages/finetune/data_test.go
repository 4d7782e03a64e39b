package finetune

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// parquetOf writes rows in row groups of 3 rows, so that the tests cross
// row-group boundaries, or of the default size with groupRows 0.
func parquetOf(t testing.TB, rows []schemas.SFTExample, groupRows ...int64) []byte {
	t.Helper()
	opts := schemas.WriterOptions{RowGroupRows: 3}
	if len(groupRows) > 0 {
		opts.RowGroupRows = groupRows[0]
	}
	var buf bytes.Buffer
	w, err := schemas.NewWriter[schemas.SFTExample](&buf, schemas.SFT, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExportJSONL(t *testing.T) {
	bad := func(edit func(*schemas.SFTExample)) []schemas.SFTExample {
		rows := examples(4)
		edit(&rows[2])
		return rows
	}
	cases := []struct {
		name      string
		rows      []schemas.SFTExample
		examples  int64
		assistant int64
		wantErr   string
	}{
		{"ok", examples(7), 7, 14, ""},
		{"empty", nil, 0, 0, ""},
		{"short mask", bad(func(e *schemas.SFTExample) { e.TrainMask = e.TrainMask[:3] }), 0, 0, `row 2 (example_id "ex2"): train_mask has 3 entries for 5 messages`},
		{"mask on tool", bad(func(e *schemas.SFTExample) { e.TrainMask[3] = true }), 0, 0, `row 2 (example_id "ex2"): message 3: train_mask is true on a "tool" message`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := parquetOf(t, c.rows)
			var out bytes.Buffer
			got, err := ExportJSONL(context.Background(), bytes.NewReader(data), int64(len(data)), &out)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Examples != c.examples || got.Assistant != c.assistant {
				t.Fatalf("counts %+v", got)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if c.examples == 0 {
				if out.Len() != 0 {
					t.Fatalf("output %q", out.String())
				}
				return
			}
			if int64(len(lines)) != c.examples {
				t.Fatalf("%d lines", len(lines))
			}
			for i, l := range lines {
				var ex map[string]any
				if err := json.Unmarshal([]byte(l), &ex); err != nil {
					t.Fatal(err)
				}
				msgs := ex["messages"].([]any)
				call := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
				fn := call["function"].(map[string]any)
				if call["type"] != "function" || fn["name"] != "calc" || fn["arguments"] != fmt.Sprintf(`{"x":%d}`, i) {
					t.Errorf("line %d: tool call %v", i, call)
				}
				if _, has := msgs[0].(map[string]any)["tool_calls"]; has {
					t.Errorf("line %d: empty tool_calls written", i)
				}
				if ids := msgs[2].(map[string]any)["token_ids"].([]any); len(ids) != 2 || ids[1] != float64(i) || msgs[2].(map[string]any)["prompt_token_ids"] == nil {
					t.Errorf("line %d: token ids %v", i, ids)
				}
				if r := msgs[2].(map[string]any)["reasoning"]; r != fmt.Sprintf("add 1 to %d", i) {
					t.Errorf("line %d: reasoning %v", i, r)
				}
				if _, has := msgs[4].(map[string]any)["reasoning"]; has {
					t.Errorf("line %d: empty reasoning written", i)
				}
				if ex["example_id"] != fmt.Sprintf("ex%d", i) || len(ex["train_mask"].([]any)) != 5 {
					t.Errorf("line %d: %s", i, l)
				}
				// Content stays verbatim: no HTML escaping of < and >.
				if !strings.Contains(l, fmt.Sprintf("<answer>%d</answer>", i+1)) {
					t.Errorf("line %d: content altered: %s", i, l)
				}
			}
		})
	}
}

func TestLineWriter(t *testing.T) {
	var out bytes.Buffer
	w := &lineWriter{log: quiet, what: "trainer", out: &out}
	io := []string{"a\nb", "c\r\n", "10%\r20%\r", "\n\n", strings.Repeat("x", maxLine+5), "\nlast"}
	for _, p := range io {
		w.Write([]byte(p))
	}
	w.flush()
	want := "a\nbc\n10%\n20%\n" + strings.Repeat("x", maxLine) + "\nxxxxx\nlast\n"
	if out.String() != want {
		t.Fatalf("lines %q", out.String())
	}
	for i := range 30 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	tail := w.tail()
	if len(tail) != tailLines || tail[0] != "line 10" || tail[len(tail)-1] != "line 29" {
		t.Fatalf("tail %q", tail)
	}
}

func TestParseModelID(t *testing.T) {
	cases := map[string]string{
		"qwen-step-1\n":          "qwen-step-1",
		"  a@b/c  ":              "a@b/c",
		"":                       "",
		"\n":                     "",
		"two\nlines":             "",
		"tab\there":              "",
		strings.Repeat("m", 257): "",
	}
	for in, want := range cases {
		got, err := parseModelID([]byte(in))
		if want == "" && err == nil || want != "" && (err != nil || got != want) {
			t.Errorf("parseModelID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestDecodeIndex(t *testing.T) {
	sha := "sha256:" + strings.Repeat("ab", 32)
	file := func(p, key string) string {
		return fmt.Sprintf(`{"path":%q,"key":%q,"size":3,"sha256":%q}`, p, key, sha)
	}
	doc := func(files ...string) string {
		return `{"format":"whale.checkpoint/1","model_id":"m","files":[` + strings.Join(files, ",") + `]}`
	}
	cases := []struct {
		name, in, wantErr string
	}{
		{"ok", doc(file("a/model.bin", "runs/x/stages/r1-w01-finetune/f.bin")), ""},
		{"string base", `{"format":"whale.checkpoint/1","model_id":"m","checkpoint":"Qwen/Qwen3-4B","files":[]}`, ""},
		{"format", `{"format":"whale.checkpoint/9","model_id":"m"}`, "format"},
		{"nothing", `{"format":"whale.checkpoint/1","model_id":"m","files":[]}`, "neither files nor"},
		{"escape", doc(file("../etc/passwd", "k/f")), "not a relative path"},
		{"absolute", doc(file("/etc/passwd", "k/f")), "not a relative path"},
		{"dot", doc(file("a/./b", "k/f")), "not a relative path"},
		{"repeated", doc(file("a", "k/f"), file("a", "k/g")), "repeated"},
		{"key", doc(file("a", "/k/f")), "bad key"},
		{"sha", strings.Replace(doc(file("a", "k/f")), sha, "sha256:xyz", 1), "bad sha256"},
		{"json", `{"format":`, "checkpoint index"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeIndex([]byte(c.in))
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("DecodeIndex = %v, want %q", err, c.wantErr)
			}
		})
	}
}

// FuzzDecodeIndex: whatever the bytes, an accepted index never names a file
// outside the checkpoint directory.
func FuzzDecodeIndex(f *testing.F) {
	sha := "sha256:" + strings.Repeat("0", 64)
	f.Add([]byte(`{"format":"whale.checkpoint/1","model_id":"m","files":[{"path":"a/b.bin","key":"k/f","size":1,"sha256":"` + sha + `"}]}`))
	f.Add([]byte(`{"format":"whale.checkpoint/1","model_id":"m","checkpoint":"x"}`))
	f.Add([]byte(`{"format":"whale.checkpoint/1","model_id":"m","files":[{"path":"..","key":"k","size":1,"sha256":"` + sha + `"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := DecodeIndex(data)
		if err != nil {
			return
		}
		for _, file := range idx.Files {
			if strings.HasPrefix(file.Path, "/") || strings.Contains("/"+file.Path+"/", "/../") || !filepath.IsLocal(file.Path) {
				t.Fatalf("accepted path %q", file.Path)
			}
		}
	})
}

func BenchmarkExportJSONL(b *testing.B) {
	data := parquetOf(b, examples(10000), 0)
	n := 0
	for b.Loop() {
		if _, err := ExportJSONL(context.Background(), bytes.NewReader(data), int64(len(data)), io.Discard); err != nil {
			b.Fatal(err)
		}
		n += 10000
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "examples/s")
}
