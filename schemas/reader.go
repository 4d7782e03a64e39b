package schemas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
)

// Rows decoded per call into the typed reader and per Arrow record batch.
// Both are small enough that batches of rollouts with long messages stay at a
// few megabytes.
const (
	typedBatchRows = 256
	arrowBatchRows = 16 * 1024
)

// readBufferSize is the typed reader's read size per column: 4 KiB (the
// parquet-go default) would turn every page of an object-store file into
// its own range request.
const readBufferSize = 1 << 20

var errStop = errors.New("stop reading")

// ReadRows decodes the file row group by row group and calls fn with each row
// in file order; it stops at the first error fn returns and returns it. When T
// is the row type of a registered table, the file is validated against that
// table first, so a missing column is an error rather than zero values. Null
// values of nullable columns (files written by other tools) read as zero
// values. fn may keep the rows it is given.
func ReadRows[T any](ctx context.Context, ra io.ReaderAt, size int64, fn func(T) error) error {
	if t, ok := tableOf[T](); ok {
		if err := Validate(ra, size, t); err != nil {
			return err
		}
	}
	f, err := parquet.OpenFile(ra, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true), parquet.ReadBufferSize(readBufferSize))
	if err != nil {
		return fmt.Errorf("open parquet file: %w", err)
	}
	r := parquet.NewGenericReader[T](f)
	defer r.Close()
	buf := make([]T, typedBatchRows)
	var row int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Zeroed slots make the reader allocate fresh slices, so rows handed
		// to fn never share memory with rows of the next batch.
		clear(buf)
		n, err := r.Read(buf)
		for i := range n {
			if ferr := fn(buf[i]); ferr != nil {
				return ferr
			}
		}
		row += int64(n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read row %d: %w", row, err)
		}
	}
}

// Head returns the first n rows of the file (fewer if it has fewer).
func Head[T any](ctx context.Context, ra io.ReaderAt, size int64, n int) ([]T, error) {
	out := make([]T, 0, min(n, typedBatchRows))
	if n <= 0 {
		return out, nil
	}
	err := ReadRows(ctx, ra, size, func(row T) error {
		out = append(out, row)
		if len(out) == n {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	return out, nil
}

// ReadColumns decodes only the named top-level columns (all of them when
// columns is empty) and calls fn with each record batch, in file order.
// Batch columns follow the order of columns. A batch is released when fn
// returns; fn must Retain what it keeps.
func ReadColumns(ctx context.Context, ra io.ReaderAt, size int64, columns []string, fn func(arrow.RecordBatch) error) error {
	fr, closeFile, err := openArrow(ra, size)
	if err != nil {
		return err
	}
	defer closeFile()
	var leaves []int
	if len(columns) > 0 {
		if leaves, err = leafColumns(fr.Manifest, columns); err != nil {
			return err
		}
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return fmt.Errorf("read columns %s: %w", strings.Join(columns, ","), err)
	}
	defer rr.Release()
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(rr.RecordBatch()); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("read columns %s: %w", strings.Join(columns, ","), err)
	}
	return ctx.Err()
}

func openArrow(ra io.ReaderAt, size int64) (*pqarrow.FileReader, func(), error) {
	pf, err := file.NewParquetReader(io.NewSectionReader(ra, 0, size))
	if err != nil {
		return nil, nil, fmt.Errorf("open parquet file: %w", err)
	}
	props := pqarrow.ArrowReadProperties{BatchSize: arrowBatchRows, Parallel: true}
	fr, err := pqarrow.NewFileReader(pf, props, memory.DefaultAllocator)
	if err != nil {
		pf.Close()
		return nil, nil, fmt.Errorf("open parquet file: %w", err)
	}
	return fr, func() { pf.Close() }, nil
}

// leafColumns maps top-level column names to the Parquet leaf columns under
// them, in the order asked.
func leafColumns(m *pqarrow.SchemaManifest, columns []string) ([]int, error) {
	var leaves []int
	seen := map[string]bool{}
	for _, name := range columns {
		if seen[name] {
			continue
		}
		seen[name] = true
		i := slices.IndexFunc(m.Fields, func(f pqarrow.SchemaField) bool { return f.Field.Name == name })
		if i < 0 {
			avail := make([]string, len(m.Fields))
			for j, f := range m.Fields {
				avail[j] = f.Field.Name
			}
			return nil, fmt.Errorf("unknown column %q; the file has %s", name, strings.Join(avail, ", "))
		}
		leaves = appendLeaves(leaves, &m.Fields[i])
	}
	return leaves, nil
}

func appendLeaves(dst []int, f *pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(dst, f.ColIndex)
	}
	for i := range f.Children {
		dst = appendLeaves(dst, &f.Children[i])
	}
	return dst
}

// Info is what a file's footer tells about it.
type Info struct {
	// Table and SchemaVersion come from the whale.* footer keys; they are
	// empty and 0 for files written by other tools.
	Table         string
	SchemaVersion int
	Rows          int64
	RowGroups     int
	CreatedBy     string
	Columns       []Column
	// Metadata holds every footer key/value pair, whale.* included.
	Metadata map[string]string
}

// Column is a top-level column with its type as text (see TypeString).
type Column struct {
	Name string
	Type string
}

// FileInfo reads only the footer. It takes no context: the footer is one or
// two reads of ra, which carries its own deadline if it has one.
func FileInfo(ra io.ReaderAt, size int64) (Info, error) {
	f, err := readFooter(ra, size)
	if err != nil {
		return Info{}, err
	}
	info := Info{
		Table:     f.meta[MetaTable],
		Rows:      f.rows,
		RowGroups: f.rowGroups,
		CreatedBy: f.createdBy,
		Metadata:  f.meta,
	}
	if info.SchemaVersion, err = f.version(); err != nil {
		return Info{}, err
	}
	for _, fld := range f.schema.Fields() {
		info.Columns = append(info.Columns, Column{Name: fld.Name, Type: TypeString(fld.Type)})
	}
	return info, nil
}

type footer struct {
	meta      map[string]string
	rows      int64
	rowGroups int
	createdBy string
	schema    *arrow.Schema
}

func readFooter(ra io.ReaderAt, size int64) (footer, error) {
	pf, err := file.NewParquetReader(io.NewSectionReader(ra, 0, size))
	if err != nil {
		return footer{}, fmt.Errorf("open parquet file: %w", err)
	}
	defer pf.Close()
	md := pf.MetaData()
	f := footer{
		meta:      map[string]string{},
		rows:      md.NumRows,
		rowGroups: md.NumRowGroups(),
		createdBy: md.GetCreatedBy(),
	}
	for _, kv := range md.KeyValueMetadata() {
		f.meta[kv.GetKey()] = kv.GetValue()
	}
	// The stored ARROW:schema of pyarrow or polars files is ignored on
	// purpose: types come from the Parquet schema alone, which is what every
	// reader, parquet-go included, agrees on.
	if f.schema, err = pqarrow.FromParquet(md.Schema, &pqarrow.ArrowReadProperties{}, nil); err != nil {
		return footer{}, fmt.Errorf("read parquet schema: %w", err)
	}
	return f, nil
}

func (f footer) version() (int, error) {
	s, ok := f.meta[MetaSchemaVersion]
	if !ok {
		return 0, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("footer key %s: %q is not a schema version", MetaSchemaVersion, s)
	}
	return v, nil
}
