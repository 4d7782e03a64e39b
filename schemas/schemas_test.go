package schemas

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// writeFile writes rows with a Writer and returns the file bytes.
func writeFile[T any](t testing.TB, table Table, opts WriterOptions, rows []T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter[T](&buf, table, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Two Write calls so that a batch boundary is exercised too.
	half := len(rows) / 2
	if err := w.Write(rows[:half]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows[half:]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Rows() != int64(len(rows)) {
		t.Fatalf("Rows() = %d, wrote %d", w.Rows(), len(rows))
	}
	return buf.Bytes()
}

func readAll[T any](t testing.TB, data []byte) []T {
	t.Helper()
	var out []T
	err := ReadRows(context.Background(), bytes.NewReader(data), int64(len(data)), func(r T) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nilToEmpty returns a deep copy of v in which nil slices are empty ones:
// Parquet has no nil list, so that is how a written nil reads back.
func nilToEmpty[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	fixNil(rv)
	return v
}

func fixNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Slice:
		if v.IsNil() {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		cp := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(cp, v)
		v.Set(cp)
		for i := range v.Len() {
			fixNil(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fixNil(v.Field(i))
		}
	}
}

func fileSchemas(t *testing.T, data []byte) (*schema.Schema, *arrow.Schema) {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	return pf.MetaData().Schema, got
}

// writeOne writes a few sample rows of a table through its row type.
func writeSample(t testing.TB, table Table, n int, opts WriterOptions) []byte {
	switch table.Name {
	case "tasks":
		return writeFile(t, table, opts, sampleTasks(n))
	case "rollouts":
		return writeFile(t, table, opts, sampleRollouts(n))
	case "sft":
		return writeFile(t, table, opts, sampleSFT(n))
	case "evals":
		return writeFile(t, table, opts, sampleEvals(n))
	case "candidates":
		return writeFile(t, table, opts, sampleCandidates(n))
	}
	t.Fatalf("no sample rows for table %q", table.Name)
	return nil
}

// stripMeta drops the PARQUET:field_id metadata pqarrow attaches to fields.
func stripMeta(t arrow.DataType) arrow.DataType {
	switch tt := t.(type) {
	case *arrow.ListType:
		f := tt.ElemField()
		f.Type, f.Metadata = stripMeta(f.Type), arrow.Metadata{}
		return arrow.ListOfField(f)
	case *arrow.StructType:
		fs := tt.Fields()
		for i := range fs {
			fs[i].Type, fs[i].Metadata = stripMeta(fs[i].Type), arrow.Metadata{}
		}
		return arrow.StructOf(fs...)
	}
	return t
}

func TestArrowSchemaMatchesWrittenFiles(t *testing.T) {
	for _, table := range Tables() {
		t.Run(table.Name, func(t *testing.T) {
			pqSchema, got := fileSchemas(t, writeSample(t, table, 10, WriterOptions{}))
			want := table.Arrow
			if got.NumFields() != want.NumFields() {
				t.Fatalf("file has %d columns, table %d:\nfile:  %s\ntable: %s", got.NumFields(), want.NumFields(), got, want)
			}
			for i, wf := range want.Fields() {
				gf := got.Field(i)
				gt := stripMeta(gf.Type)
				if gf.Name != wf.Name || gf.Nullable != wf.Nullable || !arrow.TypeEqual(gt, wf.Type) || gt.String() != wf.Type.String() {
					t.Errorf("column %d: file has %s %s nullable=%v, table says %s %s nullable=%v",
						i, gf.Name, gt, gf.Nullable, wf.Name, wf.Type, wf.Nullable)
				}
			}
			// Strings must be annotated STRING, or pyarrow and DuckDB show
			// them as binary blobs.
			for i := range pqSchema.NumColumns() {
				col := pqSchema.Column(i)
				if col.PhysicalType() == parquet.Types.ByteArray {
					if _, ok := col.LogicalType().(schema.StringLogicalType); !ok {
						t.Errorf("leaf column %s: logical type %s, want String", col.Path(), col.LogicalType())
					}
				}
			}
		})
	}
}

func TestTablesRegistry(t *testing.T) {
	names := map[string]bool{}
	for _, table := range Tables() {
		if names[table.Name] {
			t.Errorf("table %q registered twice", table.Name)
		}
		names[table.Name] = true
		if table.Version < 1 {
			t.Errorf("table %q: version %d", table.Name, table.Version)
		}
		got, ok := Lookup(table.Name)
		if !ok || got.Name != table.Name || got.Arrow != table.Arrow {
			t.Errorf("Lookup(%q) = %v, %v", table.Name, got.Name, ok)
		}
		if len(table.Columns()) != table.Arrow.NumFields() {
			t.Errorf("table %q: Columns() has %d names", table.Name, len(table.Columns()))
		}
	}
	for _, want := range []string{"tasks", "rollouts", "sft", "evals", "candidates"} {
		if !names[want] {
			t.Errorf("table %q not registered", want)
		}
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup of an unknown table succeeded")
	}
}

func roundTrip[T any](t *testing.T, table Table, rows []T) {
	t.Helper()
	// Small row groups: the read crosses row-group and batch boundaries.
	data := writeFile(t, table, WriterOptions{RowGroupRows: 97}, rows)
	got := readAll[T](t, data)
	if len(got) != len(rows) {
		t.Fatalf("read %d rows, wrote %d", len(got), len(rows))
	}
	for i := range rows {
		if want := nilToEmpty(rows[i]); !reflect.DeepEqual(got[i], want) {
			t.Fatalf("row %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	const n = 700 // several typed-read batches
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"tasks", func(t *testing.T) { roundTrip(t, Tasks, sampleTasks(n)) }},
		{"rollouts", func(t *testing.T) { roundTrip(t, Rollouts, sampleRollouts(n)) }},
		{"sft", func(t *testing.T) { roundTrip(t, SFT, sampleSFT(n)) }},
		{"evals", func(t *testing.T) { roundTrip(t, Evals, sampleEvals(n)) }},
		{"candidates", func(t *testing.T) { roundTrip(t, Candidates, sampleCandidates(n)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

func TestHead(t *testing.T) {
	rows := sampleRollouts(600)
	data := writeFile(t, Rollouts, WriterOptions{RowGroupRows: 100}, rows)
	for _, n := range []int{0, 1, 99, 100, 101, 257, 600, 1000} {
		got, err := Head[Rollout](context.Background(), bytes.NewReader(data), int64(len(data)), n)
		if err != nil {
			t.Fatalf("Head(%d): %v", n, err)
		}
		if want := min(n, len(rows)); len(got) != want {
			t.Fatalf("Head(%d) returned %d rows, want %d", n, len(got), want)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], nilToEmpty(rows[i])) {
				t.Fatalf("Head(%d) row %d differs", n, i)
			}
		}
	}
}

func TestReadRowsStopsAndCancels(t *testing.T) {
	data := writeFile(t, Evals, WriterOptions{}, sampleEvals(1000))
	boom := errors.New("boom")
	calls := 0
	err := ReadRows(context.Background(), bytes.NewReader(data), int64(len(data)), func(Eval) error {
		calls++
		if calls == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 10 {
		t.Fatalf("err = %v after %d calls, want boom after 10", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = ReadRows(ctx, bytes.NewReader(data), int64(len(data)), func(Eval) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled read: err = %v", err)
	}
}

func TestEmptyFile(t *testing.T) {
	for _, table := range Tables() {
		t.Run(table.Name, func(t *testing.T) {
			data := writeSample(t, table, 0, WriterOptions{})
			ra, size := bytes.NewReader(data), int64(len(data))
			if err := Validate(ra, size, table); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			info, err := FileInfo(ra, size)
			if err != nil {
				t.Fatal(err)
			}
			if info.Rows != 0 || info.Table != table.Name || len(info.Columns) != table.Arrow.NumFields() {
				t.Fatalf("FileInfo = %+v", info)
			}
			batches := 0
			err = ReadColumns(context.Background(), ra, size, nil, func(b arrow.RecordBatch) error {
				if b.NumRows() > 0 {
					batches++
				}
				return nil
			})
			if err != nil || batches != 0 {
				t.Fatalf("ReadColumns: %d non-empty batches, err %v", batches, err)
			}
		})
	}
	data := writeFile(t, Rollouts, WriterOptions{}, []Rollout{})
	got, err := Head[Rollout](context.Background(), bytes.NewReader(data), int64(len(data)), 5)
	if err != nil || len(got) != 0 {
		t.Fatalf("Head on empty file: %d rows, %v", len(got), err)
	}
}

func TestFileInfo(t *testing.T) {
	for _, table := range Tables() {
		t.Run(table.Name, func(t *testing.T) {
			data := writeSample(t, table, 50, WriterOptions{RowGroupRows: 20})
			info, err := FileInfo(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if info.Table != table.Name || info.SchemaVersion != table.Version {
				t.Errorf("table %q version %d, want %q %d", info.Table, info.SchemaVersion, table.Name, table.Version)
			}
			if info.Metadata[MetaTable] != table.Name || info.Metadata[MetaSchemaVersion] == "" {
				t.Errorf("footer metadata %v lacks the whale keys", info.Metadata)
			}
			if info.Rows != 50 || info.RowGroups != 3 {
				t.Errorf("rows %d in %d row groups, want 50 in 3", info.Rows, info.RowGroups)
			}
			if len(info.Columns) != table.Arrow.NumFields() {
				t.Fatalf("%d columns, want %d", len(info.Columns), table.Arrow.NumFields())
			}
			for i, f := range table.Arrow.Fields() {
				if want := (Column{f.Name, TypeString(f.Type)}); info.Columns[i] != want {
					t.Errorf("column %d = %v, want %v", i, info.Columns[i], want)
				}
			}
		})
	}
}

func TestTypeString(t *testing.T) {
	tests := []struct {
		dt   arrow.DataType
		want string
	}{
		{arrow.BinaryTypes.String, "string"},
		{arrow.BinaryTypes.LargeString, "large_string"},
		{arrow.BinaryTypes.Binary, "binary"},
		{arrow.PrimitiveTypes.Int32, "int32"},
		{arrow.PrimitiveTypes.Float64, "double"},
		{arrow.FixedWidthTypes.Boolean, "bool"},
		{arrow.ListOf(arrow.BinaryTypes.String), "list<string>"},
		{arrow.LargeListOf(arrow.PrimitiveTypes.Int64), "large_list<int64>"},
		{traceEventType, "struct<turn: int32, kind: string, action: string, feedback: string>"},
		{arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), "map<string, int64>"},
	}
	for _, tc := range tests {
		if got := TypeString(tc.dt); got != tc.want {
			t.Errorf("TypeString(%s) = %q, want %q", tc.dt, got, tc.want)
		}
	}
}

func TestWriterOptions(t *testing.T) {
	var buf bytes.Buffer
	if _, err := NewWriter[Task](&buf, Rollouts, WriterOptions{}); err == nil || !strings.Contains(err.Error(), "rollouts") {
		t.Errorf("Task rows for the rollouts table: err = %v", err)
	}
	if _, err := NewWriter[Task](&buf, Tasks, WriterOptions{Metadata: map[string]string{MetaSchemaVersion: "9"}}); err == nil {
		t.Error("reserved metadata key accepted")
	}
	if _, err := NewWriter[Task](&buf, Tasks, WriterOptions{RowGroupBytes: -1}); err == nil {
		t.Error("negative row-group bound accepted")
	}
	w, err := NewWriter[Task](&buf, Tasks, WriterOptions{Metadata: map[string]string{"whale.run": "exp1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(sampleTasks(3)...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Write(sampleTasks(1)...); err == nil {
		t.Error("Write after Close succeeded")
	}
	info, err := FileInfo(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if info.Metadata["whale.run"] != "exp1" || info.Rows != 3 {
		t.Errorf("info = %+v", info)
	}
}

func TestWriterSurfacesOutputErrors(t *testing.T) {
	w, err := NewWriter[Rollout](failingWriter{}, Rollouts, WriterOptions{RowGroupRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(sampleRollouts(100)...)
	if err == nil {
		err = w.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v, want the output's error", err)
	}
	if err2 := w.Write(sampleRollouts(1)...); err2 == nil {
		t.Error("Write after a failure succeeded")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRowGroupBounds(t *testing.T) {
	big := func(n, size int) []Rollout {
		rows := sampleRollouts(n)
		for i := range rows {
			rows[i].Messages = []Message{{Role: "assistant", Content: strings.Repeat(string(rune('a'+i%26)), size)}}
		}
		return rows
	}
	tests := []struct {
		name      string
		rows      []Rollout
		opts      WriterOptions
		minGroups int
		maxRows   int64 // most rows allowed in one row group
	}{
		{"by rows", sampleRollouts(95), WriterOptions{RowGroupRows: 10}, 10, 10},
		{"by bytes", big(200, 20_000), WriterOptions{RowGroupBytes: 1 << 20}, 4, (1 << 20) / 20_000},
		{"row bigger than cap", big(3, 3<<20), WriterOptions{RowGroupBytes: 1 << 20}, 3, 1},
		{"defaults", sampleRollouts(500), WriterOptions{}, 1, DefaultRowGroupRows},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := writeFile(t, Rollouts, tc.opts, tc.rows)
			pf, err := file.NewParquetReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			defer pf.Close()
			if got := pf.NumRowGroups(); got < tc.minGroups {
				t.Errorf("%d row groups, want at least %d", got, tc.minGroups)
			}
			var total int64
			for i := range pf.NumRowGroups() {
				n := pf.MetaData().RowGroup(i).NumRows()
				if n > tc.maxRows {
					t.Errorf("row group %d has %d rows, bound %d", i, n, tc.maxRows)
				}
				total += n
			}
			if total != int64(len(tc.rows)) {
				t.Errorf("%d rows in the file, wrote %d", total, len(tc.rows))
			}
		})
	}
}

func TestStatsColumnsExist(t *testing.T) {
	for _, table := range Tables() {
		for _, name := range table.stats {
			idx := table.Arrow.FieldIndices(name)
			if len(idx) != 1 || table.Arrow.Field(idx[0]).Type.ID() != arrow.STRING {
				t.Errorf("table %s: stats column %q is not a string column", table.Name, name)
			}
		}
	}
}

func TestHugeTextStaysOutOfFooter(t *testing.T) {
	rows := sampleRollouts(3)
	for i := range rows {
		rows[i].Messages = []Message{{Role: "assistant", Content: strings.Repeat(string(rune('a'+i)), 3<<20)}}
		rows[i].Error = strings.Repeat("e", 1<<20)
	}
	data := writeFile(t, Rollouts, WriterOptions{RowGroupBytes: 1 << 20}, rows)
	footer := binary.LittleEndian.Uint32(data[len(data)-8:])
	if len(data) > 1<<20 || footer > 64<<10 {
		t.Errorf("file %d bytes with a %d-byte footer: long text leaked into statistics", len(data), footer)
	}
	got := readAll[Rollout](t, data)
	if len(got) != 3 || got[2].Messages[0].Content != rows[2].Messages[0].Content {
		t.Error("huge rows did not read back")
	}
}

func TestDeterministicBytes(t *testing.T) {
	opts := WriterOptions{RowGroupRows: 50, Metadata: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}}
	first := writeFile(t, Rollouts, opts, sampleRollouts(200))
	for range 3 {
		if again := writeFile(t, Rollouts, opts, sampleRollouts(200)); !bytes.Equal(first, again) {
			t.Fatal("the same rows made different bytes")
		}
	}
}
