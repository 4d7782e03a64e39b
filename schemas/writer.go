package schemas

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// Row-group bounds used when WriterOptions leaves them zero. 128Ki rows is
// about what DuckDB and Arrow writers use; 64 MiB of uncompressed data keeps
// the writer's buffers, and a reader's decoded row group, small when rows
// carry long messages and traces.
const (
	DefaultRowGroupRows  = 128 * 1024
	DefaultRowGroupBytes = 64 << 20
)

// WriterOptions tune a Writer. The zero value is ready to use.
type WriterOptions struct {
	// RowGroupRows caps the rows of one row group (0: DefaultRowGroupRows).
	RowGroupRows int64
	// RowGroupBytes caps the approximate uncompressed bytes of one row group
	// (0: DefaultRowGroupBytes). A single row larger than the cap becomes a
	// row group of its own.
	RowGroupBytes int64
	// Metadata adds footer key/value pairs, e.g. the run and position that
	// produced the file. Keys starting with "whale.schema" or equal to
	// MetaTable are reserved.
	Metadata map[string]string
}

// Writer streams rows of one table into a Parquet file. It is not safe for
// concurrent use. Nothing is complete until Close returns nil; Close does not
// close the underlying io.Writer.
type Writer[T any] struct {
	table     Table
	pw        *parquet.GenericWriter[T]
	maxRows   int64
	maxBytes  int64
	rows      int64
	groupRows int64
	groupSize int64
	closed    bool
	err       error
}

// NewWriter starts a zstd-compressed Parquet file of table on w. T must be
// the table's row type (Rollout for Rollouts, and so on).
func NewWriter[T any](w io.Writer, table Table, opts WriterOptions) (*Writer[T], error) {
	if rt := reflect.TypeFor[T](); table.row != rt {
		return nil, fmt.Errorf("new %s writer: row type %s does not belong to table %q", table.Name, rt, table.Name)
	}
	var zero T
	if _, ok := any(&zero).(sizer); !ok {
		return nil, fmt.Errorf("new %s writer: row type %T has no size estimate", table.Name, zero)
	}
	if opts.RowGroupRows < 0 || opts.RowGroupBytes < 0 {
		return nil, fmt.Errorf("new %s writer: negative row-group bound (rows %d, bytes %d)", table.Name, opts.RowGroupRows, opts.RowGroupBytes)
	}
	cfg := []parquet.WriterOption{
		parquet.Compression(parquetZstd),
		parquet.KeyValueMetadata(MetaTable, table.Name),
		parquet.KeyValueMetadata(MetaSchemaVersion, strconv.Itoa(table.Version)),
	}
	for k, v := range opts.Metadata {
		if k == MetaTable || strings.HasPrefix(k, "whale.schema") {
			return nil, fmt.Errorf("new %s writer: metadata key %q is reserved", table.Name, k)
		}
		cfg = append(cfg, parquet.KeyValueMetadata(k, v))
	}
	schema := parquet.SchemaOf(zero)
	for _, path := range schema.Columns() {
		leaf, _ := schema.Lookup(path...)
		if leaf.Node.Type().Kind() == parquet.ByteArray && !slices.Contains(table.stats, path[0]) {
			cfg = append(cfg, parquet.SkipPageBounds(path...), parquet.SkipPageStatistics(path...))
		}
	}
	wr := &Writer[T]{
		table:    table,
		pw:       parquet.NewGenericWriter[T](w, cfg...),
		maxRows:  opts.RowGroupRows,
		maxBytes: opts.RowGroupBytes,
	}
	if wr.maxRows == 0 {
		wr.maxRows = DefaultRowGroupRows
	}
	if wr.maxBytes == 0 {
		wr.maxBytes = DefaultRowGroupBytes
	}
	return wr, nil
}

// Write appends rows. Rows are buffered until a row group is full; a write
// error is sticky and makes every later call fail.
func (w *Writer[T]) Write(rows ...T) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return fmt.Errorf("write %s rows: writer is closed", w.table.Name)
	}
	start := 0
	for i := range rows {
		size := any(&rows[i]).(sizer).approxSize()
		if w.groupRows > 0 && (w.groupRows >= w.maxRows || w.groupSize+size > w.maxBytes) {
			if err := w.write(rows[start:i]); err != nil {
				return err
			}
			if err := w.pw.Flush(); err != nil {
				return w.fail(fmt.Errorf("flush %s row group ending at row %d: %w", w.table.Name, w.rows, err))
			}
			w.groupRows, w.groupSize = 0, 0
			start = i
		}
		w.groupRows++
		w.groupSize += size
	}
	return w.write(rows[start:])
}

func (w *Writer[T]) write(rows []T) error {
	if len(rows) == 0 {
		return nil
	}
	n, err := w.pw.Write(rows)
	w.rows += int64(n)
	if err != nil {
		return w.fail(fmt.Errorf("write %s row %d: %w", w.table.Name, w.rows, err))
	}
	return nil
}

func (w *Writer[T]) fail(err error) error {
	w.err = err
	return err
}

// Close flushes the last row group and writes the footer. Closing twice is
// harmless; the underlying io.Writer stays open.
func (w *Writer[T]) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.pw.Close(); err != nil {
		return w.fail(fmt.Errorf("close %s writer after %d rows: %w", w.table.Name, w.rows, err))
	}
	return nil
}

// Rows returns the number of rows written so far.
func (w *Writer[T]) Rows() int64 { return w.rows }
