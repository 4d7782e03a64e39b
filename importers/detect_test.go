package importers

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/whalerun/whale/schemas"
)

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func gz(t *testing.T, data []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(data)
	w.Close()
	return b.Bytes()
}

func zst(t *testing.T, data []byte) []byte {
	var b bytes.Buffer
	w, err := zstd.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Close()
	return b.Bytes()
}

func TestDetectAndImportFile(t *testing.T) {
	dir := t.TempDir()
	puzzles, _ := os.ReadFile("testdata/puzzles.csv")
	oldPuzzles, _ := os.ReadFile("testdata/puzzles_old.csv")
	noHeader, _ := os.ReadFile("testdata/puzzles_noheader.csv")
	tasks, _ := os.ReadFile("testdata/tasks.jsonl")
	parquet := writeParquet(t, dapoSchema, dapoRows, 10)
	tests := []struct {
		file  string
		data  []byte
		want  Format
		tasks int
	}{
		{"a.jsonl", tasks, FormatJSONL, 4},
		{"a.ndjson", tasks, FormatJSONL, 4},
		{"a.jsonl.gz", gz(t, tasks), FormatJSONL, 4},
		{"tasks.txt", tasks, FormatJSONL, 4},
		{"lichess_db_puzzle.csv", puzzles, FormatLichess, 5},
		{"lichess_db_puzzle.csv.zst", zst(t, puzzles), FormatLichess, 5},
		{"old.csv", oldPuzzles, FormatLichess, 5},
		{"noheader.csv", noHeader, FormatLichess, 5},
		{"train.parquet", parquet, FormatVerl, 2},
		{"train.bin", parquet, FormatVerl, 2},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			p := writeFile(t, dir, tt.file, tt.data)
			got, err := Detect(p)
			if err != nil || got != tt.want {
				t.Fatalf("Detect = %v, %v; want %v", got, err, tt.want)
			}
			opts := Options{Split: "train"}
			if tt.want == FormatJSONL {
				opts.Domain = "searchqa" // for lines that do not name one
			}
			var imported []schemas.Task
			err = ImportFile(context.Background(), p, FormatUnknown, opts, collect(t, &imported))
			n := len(imported)
			if err != nil || n != tt.tasks {
				t.Errorf("ImportFile: %v, %d tasks, want %d", err, n, tt.tasks)
			}
		})
	}
	bad := []struct {
		file string
		data []byte
		want string
	}{
		{"other.csv", []byte("id,question,answer\n1,q,a\n"), `a CSV file but not the Lichess puzzle layout: its first line is "id,question,answer"`},
		{"notes.txt", []byte("hello\n"), "cannot tell the format"},
	}
	for _, b := range bad {
		p := writeFile(t, dir, b.file, b.data)
		if _, err := Detect(p); err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("Detect(%s) = %v, want %q", b.file, err, b.want)
		}
	}
	if err := ImportFile(context.Background(), writeFile(t, dir, "x.parquet.gz", gz(t, parquet)), FormatUnknown, Options{}, nil); err == nil ||
		!strings.Contains(err.Error(), "decompress") {
		t.Errorf("compressed parquet: %v", err)
	}
}

func TestFormatNames(t *testing.T) {
	for _, f := range []Format{FormatJSONL, FormatLichess, FormatVerl} {
		back, err := ParseFormat(f.String())
		if err != nil || back != f {
			t.Errorf("%v: %v %v", f, back, err)
		}
	}
	if FormatJSONL.String() != "jsonl" || FormatLichess.String() != "lichess" || FormatVerl.String() != "verl" {
		t.Error("format names changed")
	}
	if _, err := ParseFormat("csv"); err == nil {
		t.Error("ParseFormat(csv) accepted")
	}
}

func TestStem(t *testing.T) {
	for in, want := range map[string]string{
		"tasks.jsonl": "tasks", "dir/nq.train.jsonl.gz": "nq.train", "noext": "noext", ".jsonl": ".jsonl", "-": "-",
	} {
		if got := stem(in); got != want {
			t.Errorf("stem(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDomainOf(t *testing.T) {
	for src, want := range map[string]string{
		"nq": "searchqa", "hotpotqa": "searchqa", "2wikimultihopqa": "searchqa", "bamboogle": "searchqa", "nq_search": "searchqa",
		"math_dapo": "math", "aime24": "math", "openai/gsm8k": "math", "lighteval/MATH": "math",
		"lichess": "chess", "chess_puzzles": "chess", "my_set": "",
	} {
		if got := domainOf(src); got != want {
			t.Errorf("domainOf(%q) = %q, want %q", src, got, want)
		}
	}
}
