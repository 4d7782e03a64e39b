package searchqa

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/klauspost/compress/zstd"

	"github.com/whalerun/whale/schemas"
)

// Doc is one corpus passage: Contents' first line is its title.
type Doc struct {
	ID       string
	Contents string
}

// Corpus streams documents in order. Each calls fn once per document and
// stops at the first error fn returns, returning it. Each may be called
// more than once; every call reads the corpus from its start.
type Corpus interface {
	Each(ctx context.Context, fn func(Doc) error) error
}

// CorpusFunc adapts a function to Corpus.
type CorpusFunc func(ctx context.Context, fn func(Doc) error) error

// Each calls f.
func (f CorpusFunc) Each(ctx context.Context, fn func(Doc) error) error { return f(ctx, fn) }

type jsonlDoc struct {
	ID       json.RawMessage `json:"id"`
	Contents *string         `json:"contents"`
	Title    *string         `json:"title"`
	Text     *string         `json:"text"`
}

// eachJSONL reads Search-R1 corpus lines {"id": "0", "contents":
// "\"Title\"\ntext"} from r; name labels errors (file:line). The id may be
// a string or a number; a line without one gets its 0-based line index
// among documents, which is the id Search-R1's dense retriever uses. A line
// with "title" and "text" instead of "contents" is read as title + "\n" +
// text. Blank lines are skipped.
func eachJSONL(ctx context.Context, r io.Reader, name string, fn func(Doc) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	lineNo := 0
	n := 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			lineNo++
			if lineNo%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if t := bytes.TrimSpace(line); len(t) > 0 {
				d, derr := parseJSONLDoc(t, n)
				if derr != nil {
					return fmt.Errorf("%s:%d: %w", name, lineNo, derr)
				}
				n++
				if err := fn(d); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("read %s after line %d: %w", name, lineNo, err)
		}
	}
}

func parseJSONLDoc(line []byte, index int) (Doc, error) {
	var j jsonlDoc
	if err := json.Unmarshal(line, &j); err != nil {
		return Doc{}, fmt.Errorf("not a JSON object: %w", err)
	}
	var d Doc
	if len(j.ID) > 0 && !isNull(j.ID) {
		id, err := stringOrNumber(j.ID)
		if err != nil {
			return Doc{}, fmt.Errorf("field \"id\": %w", err)
		}
		d.ID = id
	}
	if d.ID == "" {
		d.ID = strconv.Itoa(index)
	}
	switch {
	case j.Contents != nil:
		d.Contents = *j.Contents
	case j.Text != nil:
		d.Contents = *j.Text
		if j.Title != nil && *j.Title != "" {
			d.Contents = *j.Title + "\n" + *j.Text
		}
	default:
		return Doc{}, fmt.Errorf("missing field \"contents\" (or \"title\" and \"text\")")
	}
	return d, nil
}

// eachParquet reads a Parquet file with a string column "contents" (or
// "title" and "text") and an optional "id" column of strings or integers;
// other columns are not read. A row without an id gets its 0-based row
// index.
func eachParquet(ctx context.Context, ra io.ReaderAt, size int64, name string, fn func(Doc) error) error {
	info, err := schemas.FileInfo(ra, size)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	has := func(c string) bool {
		return slices.ContainsFunc(info.Columns, func(x schemas.Column) bool { return x.Name == c })
	}
	var cols []string
	switch {
	case has("contents"):
		cols = []string{"contents"}
	case has("text"):
		cols = []string{"text"}
		if has("title") {
			cols = append(cols, "title")
		}
	default:
		names := make([]string, len(info.Columns))
		for i, c := range info.Columns {
			names[i] = c.Name
		}
		return fmt.Errorf("%s: no column \"contents\" (or \"title\" and \"text\"); the file has %s", name, strings.Join(names, ", "))
	}
	hasID := has("id")
	if hasID {
		cols = append(cols, "id")
	}
	row := 0
	return schemas.ReadColumns(ctx, ra, size, cols, func(rec arrow.RecordBatch) error {
		n := int(rec.NumRows())
		for i := 0; i < n; i++ {
			var d Doc
			text, ok, err := cell(rec.Column(0), i)
			if err != nil || !ok {
				return fmt.Errorf("%s: row %d: column %q: %w", name, row, cols[0], nullOr(err))
			}
			d.Contents = text
			if cols[0] == "text" && len(cols) > 1 && cols[1] == "title" {
				title, ok, err := cell(rec.Column(1), i)
				if err != nil {
					return fmt.Errorf("%s: row %d: column \"title\": %w", name, row, err)
				}
				if ok && title != "" {
					d.Contents = title + "\n" + text
				}
			}
			if hasID {
				id, ok, err := cell(rec.Column(len(cols)-1), i)
				if err != nil {
					return fmt.Errorf("%s: row %d: column \"id\": %w", name, row, err)
				}
				if ok {
					d.ID = id
				}
			}
			if d.ID == "" {
				d.ID = strconv.Itoa(row)
			}
			row++
			if err := fn(d); err != nil {
				return err
			}
		}
		return nil
	})
}

func nullOr(err error) error {
	if err != nil {
		return err
	}
	return errors.New("value is null")
}

// cell returns the value of row i of a string or integer column as text,
// and false when it is null.
func cell(col arrow.Array, i int) (string, bool, error) {
	if col.IsNull(i) {
		return "", false, nil
	}
	switch c := col.(type) {
	case *array.String:
		return c.Value(i), true, nil
	case *array.LargeString:
		return c.Value(i), true, nil
	case *array.StringView:
		return c.Value(i), true, nil
	case *array.Binary:
		return string(c.Value(i)), true, nil
	case *array.LargeBinary:
		return string(c.Value(i)), true, nil
	case *array.Int64:
		return strconv.FormatInt(c.Value(i), 10), true, nil
	case *array.Int32:
		return strconv.FormatInt(int64(c.Value(i)), 10), true, nil
	case *array.Uint64:
		return strconv.FormatUint(c.Value(i), 10), true, nil
	case *array.Uint32:
		return strconv.FormatUint(uint64(c.Value(i)), 10), true, nil
	}
	return "", false, fmt.Errorf("type %s is neither string nor integer", col.DataType())
}

// FileCorpus reads a local corpus file, by its name: .jsonl (also .json,
// .jsonl.gz, .jsonl.zst) or .parquet. A JSONL line or a Parquet row holds
// "contents" (or "title" and "text", read as title + "\n" + text) and an
// optional "id", a string or an integer; a document without an id gets its
// 0-based index.
func FileCorpus(path string) Corpus {
	return CorpusFunc(func(ctx context.Context, fn func(Doc) error) error {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("open corpus: %w", err)
		}
		defer f.Close()
		if isParquet(path) {
			st, err := f.Stat()
			if err != nil {
				return fmt.Errorf("open corpus: %w", err)
			}
			return eachParquet(ctx, f, st.Size(), path, fn)
		}
		return eachJSONLMaybeCompressed(ctx, f, path, fn)
	})
}

func isParquet(name string) bool { return strings.EqualFold(filepath.Ext(name), ".parquet") }

func eachJSONLMaybeCompressed(ctx context.Context, r io.Reader, name string, fn func(Doc) error) error {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("open corpus %s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	case ".zst":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return fmt.Errorf("open corpus %s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	case ".jsonl", ".json", ".ndjson":
	default:
		return fmt.Errorf("corpus %s: unknown format; name it .jsonl, .jsonl.gz, .jsonl.zst or .parquet", name)
	}
	return eachJSONL(ctx, r, name, fn)
}
