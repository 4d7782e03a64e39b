package importers

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/whalerun/whale/schemas"
)

// within fails t when f takes longer than d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if took := time.Since(start); took > d {
		t.Errorf("%s took %v, more than %v", what, took.Round(time.Millisecond), d)
	}
}

// /dev/zero never ends and has no newline: the import stops at the first
// line's bound, in well under a second, naming the file and the bound.
func TestDevZero(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	for _, f := range []Format{FormatJSONL, FormatLichess, FormatVerl, FormatUnknown} {
		t.Run(f.String(), func(t *testing.T) {
			var err error
			within(t, 5*time.Second, "import of /dev/zero", func() {
				err = ImportFile(context.Background(), "/dev/zero", f, Options{Domain: "math"}, func(schemas.Task) error { return nil })
			})
			wantErr(t, err, "/dev/zero:1: line is longer than 8388608 bytes")
		})
	}
}

// /dev/urandom is not text: the import stops at its first byte that is
// not UTF-8 instead of copying the device up to the input bound.
func TestDevURandom(t *testing.T) {
	if _, err := os.Stat("/dev/urandom"); err != nil {
		t.Skip("no /dev/urandom")
	}
	for _, f := range []Format{FormatJSONL, FormatLichess} {
		t.Run(f.String(), func(t *testing.T) {
			var err error
			within(t, 5*time.Second, "import of /dev/urandom", func() {
				err = ImportFile(context.Background(), "/dev/urandom", f, Options{Domain: "math"}, func(schemas.Task) error { return nil })
			})
			wantErr(t, err, "not UTF-8 text")
		})
	}
}

// A 10 MB line is refused, naming its line; so is a 10 MB CSV record.
func TestLongLineRefused(t *testing.T) {
	dir := t.TempDir()
	long := `{"question": "` + strings.Repeat("x", 10<<20) + `", "answer": "a"}`
	p := writeFile(t, dir, "t.jsonl", []byte(goodLines(2)+long+"\n"+goodLines(1)))
	var got []schemas.Task
	err := ImportFile(context.Background(), p, FormatUnknown, Options{Domain: "math"}, collect(t, &got))
	wantErr(t, err, p+":3: line is longer than 8388608 bytes")
	if len(got) != 2 {
		t.Errorf("%d tasks before the long line, want 2", len(got))
	}

	puzzles, err := os.ReadFile("testdata/puzzles.csv")
	if err != nil {
		t.Fatal(err)
	}
	csv := append(append([]byte{}, puzzles...), []byte("x,"+strings.Repeat("y", 10<<20)+"\n")...)
	p = writeFile(t, dir, "p.csv", csv)
	err = ImportFile(context.Background(), p, FormatLichess, Options{}, func(schemas.Task) error { return nil })
	wantErr(t, err, "a CSV record longer than 8388608 bytes")
}

// An unclosed quote makes the rest of the file one CSV field: refused at
// the record bound, saying where the record starts.
func TestCSVUnclosedQuote(t *testing.T) {
	puzzles, err := os.ReadFile("testdata/puzzles.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(puzzles), "\n"), "\n")
	src := lines[0] + "\n" + lines[1] + "\n\"open," + strings.Repeat("more text\n", 10000)
	err = LichessCSV(context.Background(), strings.NewReader(src), "p.csv", Options{MaxLineBytes: 1000}, func(schemas.Task) error { return nil })
	wantErr(t, err, "p.csv:", "a CSV record longer than 1000 bytes", "starts after the record of line 2", "unclosed quote")
}

// MaxInputBytes bounds the file, refused before reading when its size
// says so, and what a compressed file decompresses to.
func TestInputBytesBound(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "t.jsonl", []byte(goodLines(100)))
	err := ImportFile(context.Background(), p, FormatUnknown, Options{Domain: "math", MaxInputBytes: 1000}, func(schemas.Task) error { return nil })
	wantErr(t, err, p, "more than the 1000 an import reads")

	// 64 MB of blank lines compress to almost nothing.
	bomb := writeFile(t, dir, "bomb.jsonl.gz", gz(t, bytes.Repeat([]byte("\n"), 64<<20)))
	within(t, 10*time.Second, "import of a gzip bomb", func() {
		err = ImportFile(context.Background(), bomb, FormatUnknown, Options{Domain: "math", MaxInputBytes: 1 << 20}, func(schemas.Task) error { return nil })
	})
	wantErr(t, err, bomb+":", "the file decompresses to more than 1048576 bytes")
}

// A cancel stops an import between two reads, whatever the loop is doing.
func TestCancelMidImport(t *testing.T) {
	p := writeFile(t, t.TempDir(), "t.jsonl", []byte(goodLines(200000)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	var err error
	within(t, 2*time.Second, "a cancelled import", func() {
		err = ImportFile(ctx, p, FormatUnknown, Options{Domain: "math"}, func(schemas.Task) error {
			if n++; n == 1000 {
				cancel()
			}
			return nil
		})
	})
	if !errors.Is(err, context.Canceled) || n >= 200000 {
		t.Errorf("err = %v after %d tasks; want context.Canceled well before the end", err, n)
	}

	// The CSV reader reads ahead; the cancel reaches it through the reads.
	puzzles, _ := os.ReadFile("testdata/puzzles.csv")
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	err = LichessCSV(ctx2, &endless{data: puzzles}, "p.csv", Options{}, func(schemas.Task) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("CSV: err = %v, want context.Canceled", err)
	}
}

// endless repeats data forever.
type endless struct {
	data []byte
	off  int
}

func (e *endless) Read(p []byte) (int, error) {
	n := copy(p, e.data[e.off:])
	e.off = (e.off + n) % len(e.data)
	return n, nil
}

// Metadata that claims more than the file holds is refused before the
// Parquet reader sizes anything by it.
func TestParquetMetadataBounds(t *testing.T) {
	data := writeParquet(t, dapoSchema, dapoRows, 10)
	if _, err := importVerl(data, "ok.parquet", Options{}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	for _, tc := range []struct {
		name  string
		patch func(path []int16, v int64) int64
		wants []string
	}{
		{"row group of 5 billion rows", func(path []int16, v int64) int64 {
			if pathIs(path, 4, -1, 3) || pathIs(path, 3) { // RowGroup.num_rows, FileMetaData.num_rows
				return 5_000_000_000
			}
			return v
		}, []string{"row group 0 claims 5000000000 rows", "at most 1073741824"}},
		{"negative rows", func(path []int16, v int64) int64 {
			if pathIs(path, 4, -1, 3) {
				return -1
			}
			return v
		}, []string{"row group 0 claims -1 rows"}},
		{"column chunk of 1 TB", func(path []int16, v int64) int64 {
			if pathIs(path, 4, -1, 1, -1, 3, 7) { // ColumnMetaData.total_compressed_size
				return 1 << 40
			}
			return v
		}, []string{"column 0 claims 1099511627776 bytes", "outside the file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := patchFooter(t, data, tc.patch)
			_, err := importVerl(bad, "bad.parquet", Options{})
			wantErr(t, err, append([]string{"bad.parquet"}, tc.wants...)...)
		})
	}

	bad := bytes.Clone(data)
	binary.LittleEndian.PutUint32(bad[len(bad)-8:], 1<<31)
	_, err := importVerl(bad, "bad.parquet", Options{})
	wantErr(t, err, "bad.parquet: the Parquet footer claims 2147483648 bytes of metadata")
}

// pathIs matches a path of thrift field ids and list indexes; -1 matches
// any list index.
func pathIs(path []int16, want ...int16) bool {
	if len(path) != len(want) {
		return false
	}
	for i := range path {
		if want[i] != -1 && path[i] != want[i] {
			return false
		}
	}
	return true
}

// patchFooter rewrites the file metadata of a Parquet file, passing every
// i64 to patch with its path (field ids, with list indexes as -1).
func patchFooter(t *testing.T, data []byte, patch func(path []int16, v int64) int64) []byte {
	t.Helper()
	n := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	footer := data[len(data)-8-n : len(data)-8]
	ctx := context.Background()
	conf := &thrift.TConfiguration{}
	in := thrift.NewTCompactProtocolConf(thrift.NewStreamTransportR(bytes.NewReader(footer)), conf)
	var buf bytes.Buffer
	out := thrift.NewTCompactProtocolConf(thrift.NewStreamTransportW(&buf), conf)
	if err := copyThrift(ctx, in, out, thrift.STRUCT, nil, patch); err != nil {
		t.Fatalf("patch footer: %v", err)
	}
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res := append(bytes.Clone(data[:len(data)-8-n]), buf.Bytes()...)
	res = binary.LittleEndian.AppendUint32(res, uint32(buf.Len()))
	return append(res, "PAR1"...)
}

func copyThrift(ctx context.Context, in, out thrift.TProtocol, typ thrift.TType, path []int16, patch func([]int16, int64) int64) error {
	switch typ {
	case thrift.STRUCT:
		if _, err := in.ReadStructBegin(ctx); err != nil {
			return err
		}
		out.WriteStructBegin(ctx, "")
		for {
			_, ft, id, err := in.ReadFieldBegin(ctx)
			if err != nil {
				return err
			}
			if ft == thrift.STOP {
				break
			}
			out.WriteFieldBegin(ctx, "", ft, id)
			if err := copyThrift(ctx, in, out, ft, append(path, id), patch); err != nil {
				return err
			}
			in.ReadFieldEnd(ctx)
			out.WriteFieldEnd(ctx)
		}
		in.ReadStructEnd(ctx)
		out.WriteFieldStop(ctx)
		return out.WriteStructEnd(ctx)
	case thrift.LIST, thrift.SET:
		et, size, err := in.ReadListBegin(ctx)
		if err != nil {
			return err
		}
		out.WriteListBegin(ctx, et, size)
		for range size {
			if err := copyThrift(ctx, in, out, et, append(path, -1), patch); err != nil {
				return err
			}
		}
		in.ReadListEnd(ctx)
		return out.WriteListEnd(ctx)
	case thrift.BOOL:
		v, err := in.ReadBool(ctx)
		if err != nil {
			return err
		}
		return out.WriteBool(ctx, v)
	case thrift.BYTE:
		v, err := in.ReadByte(ctx)
		if err != nil {
			return err
		}
		return out.WriteByte(ctx, v)
	case thrift.I16:
		v, err := in.ReadI16(ctx)
		if err != nil {
			return err
		}
		return out.WriteI16(ctx, v)
	case thrift.I32:
		v, err := in.ReadI32(ctx)
		if err != nil {
			return err
		}
		return out.WriteI32(ctx, v)
	case thrift.I64:
		v, err := in.ReadI64(ctx)
		if err != nil {
			return err
		}
		return out.WriteI64(ctx, patch(path, v))
	case thrift.DOUBLE:
		v, err := in.ReadDouble(ctx)
		if err != nil {
			return err
		}
		return out.WriteDouble(ctx, v)
	case thrift.STRING:
		v, err := in.ReadBinary(ctx)
		if err != nil {
			return err
		}
		return out.WriteBinary(ctx, v)
	}
	return fmt.Errorf("thrift type %v not handled", typ)
}

// A file that is not there, or a directory, is said to be so.
func TestOpenInputNotAFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenInput(context.Background(), filepath.Join(dir, "nope.jsonl"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := OpenInput(context.Background(), dir, Options{}); err == nil || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("directory: %v", err)
	}
}

// The copy of a FIFO checks the lines of text only: a compressed stream,
// however it is cut into reads, is not text.
func TestLineCheckBinary(t *testing.T) {
	raw := make([]byte, 1<<16)
	rand.NewChaCha8([32]byte{1}).Read(raw) // incompressible: long runs without '\n'
	data := gz(t, raw)
	if bytes.IndexByte(data, '\n') < 0 && len(data) < 200 {
		t.Fatal("fixture too small to matter")
	}
	c := &lineCheck{max: 100, name: "t.jsonl.gz"}
	for i := range data {
		if _, err := c.Write(data[i : i+1]); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	c = &lineCheck{max: 100, name: "t.jsonl"}
	_, err := c.Write(bytes.Repeat([]byte("x"), 101))
	wantErr(t, err, "t.jsonl:1: line is longer than 100 bytes")
}
