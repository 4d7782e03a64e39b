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
	// MaxLineBytes bounds one JSONL line and one CSV record, the text of
	// one task; default DefaultMaxLineBytes.
	MaxLineBytes int
	// MaxInputBytes bounds the bytes read from the file and, for a .gz or
	// .zst file, the bytes decompressed from it; default
	// DefaultMaxInputBytes.
	MaxInputBytes int64
	// BatchRows is the Parquet read batch; default 1024.
	BatchRows int
}

const (
	// DefaultMaxLineBytes is the default Options.MaxLineBytes: far more
	// than the longest task seen (a prompt of a few hundred KB), far less
	// than what would make one line a memory problem.
	DefaultMaxLineBytes = 8 << 20
	// DefaultMaxInputBytes is the default Options.MaxInputBytes: the
	// 5-million-puzzle Lichess dump is about 1 GB decompressed.
	DefaultMaxInputBytes = 8 << 30

	defaultBatchRows = 1024
	// checkEvery is how many tasks pass between context checks.
	checkEvery = 256
)

func (o Options) maxLine() int {
	if o.MaxLineBytes <= 0 {
		return DefaultMaxLineBytes
	}
	return o.MaxLineBytes
}

func (o Options) maxInput() int64 {
	if o.MaxInputBytes <= 0 {
		return DefaultMaxInputBytes
	}
	return o.MaxInputBytes
}

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
// files and unknown extensions, from its first bytes. For a file that is
// not regular (a FIFO), which reading consumes, use OpenInput.
func Detect(path string) (Format, error) {
	return detect(path, path)
}

// detect is Detect for the file at path, called name in messages.
func detect(path, name string) (Format, error) {
	base, _ := compression(name)
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
		return FormatUnknown, fmt.Errorf("detect format of %s: %w", name, err)
	}
	head = head[:n]
	if line, _, _ := bytes.Cut(head, []byte("\n")); looksLichess(line) {
		return FormatLichess, nil
	}
	if ext == ".csv" {
		line, _, _ := bytes.Cut(head, []byte("\n"))
		return FormatUnknown, fmt.Errorf("%s: a CSV file but not the Lichess puzzle layout: its first line is %s, expected the header %s",
			name, quote(strings.TrimSpace(string(line))), strings.Join(lichessColumns, ","))
	}
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(head, utf8BOM), " \t\r\n")
	switch {
	case bytes.HasPrefix(head, []byte("PAR1")):
		return FormatVerl, nil
	case bytes.HasPrefix(trimmed, []byte("{")):
		return FormatJSONL, nil
	}
	return FormatUnknown, fmt.Errorf("%s: cannot tell the format; expected .jsonl/.ndjson (JSON lines), .csv (Lichess puzzles) or .parquet (verl layout), or pass the format", name)
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
// (the Lichess dump ships as .csv.zst). Nothing bounds what it reads:
// ImportFile and Input bound it.
func OpenFile(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	_, kind := compression(path)
	if kind == "" {
		return f, nil
	}
	zr, err := decompress(f, kind, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &stackCloser{Reader: zr, closers: []io.Closer{zr, f}}, nil
}

// decompress reads r, compressed as kind says (.gz, .zst, .zstd); name
// is for messages. Closing the result does not close r.
func decompress(r io.Reader, kind, name string) (io.ReadCloser, error) {
	switch kind {
	case ".gz":
		zr, err := gzip.NewReader(bufio.NewReader(r))
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		return zr, nil
	case ".zst", ".zstd":
		zr, err := zstd.NewReader(bufio.NewReader(r), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("%s: zstd: %w", name, err)
		}
		return &stackCloser{Reader: zr, closers: []io.Closer{closerFunc(func() error { zr.Close(); return nil })}}, nil
	}
	return io.NopCloser(r), nil
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
// it), bounded as Input says. Errors name the path as given.
func ImportFile(ctx context.Context, path string, f Format, opts Options, fn func(schemas.Task) error) error {
	in, err := OpenInput(ctx, path, opts)
	if err != nil {
		return err
	}
	defer in.Close()
	return in.Import(ctx, f, opts, fn)
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
