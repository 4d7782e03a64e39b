package importers

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/whalerun/whale/schemas"
)

// Options are the caller's choices for an import. See the package doc for
// how Domain and Split combine with values in the data.
type Options struct {
	// Domain of the tasks (searchqa, math, chess, demo).
	Domain string
	// Split of the tasks (train, test, ...).
	Split string
	// Domains, when set, are the domains a task may have (the names of
	// domains/registry): a task of any other, stated in the data or in
	// Domain, stops the import with an error naming its line or row.
	Domains []string
	// MaxLineBytes bounds one JSONL line; default 64 MiB.
	MaxLineBytes int
	// BatchRows is the Parquet read batch; default 1024.
	BatchRows int
}

const (
	defaultMaxLine   = 64 << 20
	defaultBatchRows = 1024
	// checkEvery is how many tasks pass between context checks.
	checkEvery = 256
)

// Format is an input layout.
type Format int

const (
	FormatUnknown Format = iota
	FormatJSONL
	FormatLichess
	FormatVerl
)

var formatNames = map[Format]string{FormatJSONL: "jsonl", FormatLichess: "lichess", FormatVerl: "verl"}

func (f Format) String() string {
	if n, ok := formatNames[f]; ok {
		return n
	}
	return "unknown"
}

// ParseFormat maps "jsonl", "lichess" or "verl" to a Format.
func ParseFormat(name string) (Format, error) {
	for f, n := range formatNames {
		if strings.EqualFold(name, n) {
			return f, nil
		}
	}
	return FormatUnknown, fmt.Errorf("unknown import format %q (known: jsonl, lichess, verl)", name)
}

// Detect names the format of the file at path from its extension (.jsonl,
// .ndjson, .csv, .parquet, optionally followed by .gz or .zst) and, for CSV
// files and unknown extensions, from its first bytes.
func Detect(path string) (Format, error) {
	base, _ := compression(path)
	ext := strings.ToLower(filepath.Ext(base))
	switch ext {
	case ".jsonl", ".ndjson":
		return FormatJSONL, nil
	case ".parquet":
		return FormatVerl, nil
	}
	rc, err := OpenFile(path)
	if err != nil {
		return FormatUnknown, err
	}
	defer rc.Close()
	head := make([]byte, 4096)
	n, err := io.ReadFull(rc, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return FormatUnknown, fmt.Errorf("detect format of %s: %w", path, err)
	}
	head = head[:n]
	if line, _, _ := bytes.Cut(head, []byte("\n")); looksLichess(line) {
		return FormatLichess, nil
	}
	if ext == ".csv" {
		line, _, _ := bytes.Cut(head, []byte("\n"))
		return FormatUnknown, fmt.Errorf("%s: a CSV file but not the Lichess puzzle layout: its first line is %s, expected the header %s",
			path, quote(strings.TrimSpace(string(line))), strings.Join(lichessColumns, ","))
	}
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(head, utf8BOM), " \t\r\n")
	switch {
	case bytes.HasPrefix(head, []byte("PAR1")):
		return FormatVerl, nil
	case bytes.HasPrefix(trimmed, []byte("{")):
		return FormatJSONL, nil
	}
	return FormatUnknown, fmt.Errorf("%s: cannot tell the format; expected .jsonl/.ndjson (JSON lines), .csv (Lichess puzzles) or .parquet (verl layout), or pass the format", path)
}

// looksLichess accepts the Lichess header or a headerless puzzle row.
func looksLichess(line []byte) bool {
	line = bytes.TrimPrefix(line, utf8BOM)
	if bytes.HasPrefix(line, []byte("PuzzleId,")) {
		return true
	}
	fields := strings.Split(strings.TrimRight(string(line), "\r"), ",")
	return (len(fields) == 9 || len(fields) == 10) && checkFEN(fields[1]) == ""
}

func compression(path string) (base, kind string) {
	lower := strings.ToLower(path)
	for _, ext := range []string{".gz", ".zst", ".zstd"} {
		if strings.HasSuffix(lower, ext) {
			return path[:len(path)-len(ext)], ext
		}
	}
	return path, ""
}

// OpenFile opens path for reading, decompressing .gz and .zst/.zstd files
// (the Lichess dump ships as .csv.zst).
func OpenFile(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	_, kind := compression(path)
	switch kind {
	case ".gz":
		zr, err := gzip.NewReader(bufio.NewReader(f))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
		return &stackCloser{Reader: zr, closers: []io.Closer{zr, f}}, nil
	case ".zst", ".zstd":
		zr, err := zstd.NewReader(bufio.NewReader(f), zstd.WithDecoderConcurrency(1))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: zstd: %w", path, err)
		}
		return &stackCloser{Reader: zr, closers: []io.Closer{closerFunc(func() error { zr.Close(); return nil }), f}}, nil
	}
	return f, nil
}

type closerFunc func() error

func (c closerFunc) Close() error { return c() }

type stackCloser struct {
	io.Reader
	closers []io.Closer
}

func (s *stackCloser) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// ImportFile imports the file at path in format f (FormatUnknown: Detect
// it). Errors name the path as given.
func ImportFile(ctx context.Context, path string, f Format, opts Options, fn func(schemas.Task) error) error {
	if f == FormatUnknown {
		var err error
		if f, err = Detect(path); err != nil {
			return err
		}
	}
	if f == FormatVerl {
		if _, kind := compression(path); kind != "" {
			return fmt.Errorf("%s: Parquet files are compressed inside; decompress the %s file first", path, kind)
		}
		file, err := os.Open(path)
		if err != nil {
			return err
		}
		defer file.Close()
		st, err := file.Stat()
		if err != nil {
			return err
		}
		return VerlParquet(ctx, file, st.Size(), path, opts, fn)
	}
	rc, err := OpenFile(path)
	if err != nil {
		return err
	}
	defer rc.Close()
	switch f {
	case FormatJSONL:
		return JSONL(ctx, rc, path, opts, fn)
	case FormatLichess:
		return LichessCSV(ctx, rc, path, opts, fn)
	}
	return fmt.Errorf("%s: unsupported format %v", path, f)
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// unknownDomain returns what is wrong with domain d under o, or "".
func (o Options) unknownDomain(d string) string {
	if len(o.Domains) == 0 || slices.Contains(o.Domains, d) {
		return ""
	}
	return fmt.Sprintf("unknown domain %q: the known domains are %s", d, strings.Join(o.Domains, ", "))
}

// badUTF8 returns the byte offset of the first byte of b that is not
// part of valid UTF-8, or -1. Tasks are written to Parquet STRING
// columns, which hold UTF-8 only: readers (pyarrow, DuckDB, polars)
// refuse or mangle anything else, so invalid bytes are refused here, where
// the line is known, rather than replaced.
func badUTF8[T string | []byte](b T) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRuneInString(string(b[i:min(i+utf8.UTFMax, len(b))]))
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
}

// utf8Msg says where invalid UTF-8 is and what to do about it.
func utf8Msg(b byte, offset int, of string) string {
	return fmt.Sprintf("invalid UTF-8: byte 0x%02x at byte offset %d of the %s; tasks must be UTF-8 text (convert the file, e.g. iconv -f latin1 -t utf-8)", b, offset, of)
}

// stem is the file name without directories and extensions, for generated
// ids ("data/nq.train.jsonl.gz" → "nq.train").
func stem(name string) string {
	base, _ := compression(filepath.Base(name))
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	if base == "" {
		return "task"
	}
	return base
}
