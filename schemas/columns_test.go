package schemas

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

func TestReadColumnsProjection(t *testing.T) {
	gen := newRolloutGen(512)
	rows := make([]Rollout, 3000)
	for i := range rows {
		rows[i] = gen.row(i)
	}
	data := writeFile(t, Rollouts, WriterOptions{RowGroupRows: 1000}, rows)
	size := int64(len(data))

	tests := []struct {
		name     string
		columns  []string
		maxShare float64 // most of the file that may be read
	}{
		{"scalars in asked order", []string{"reward", "task_id", "correct"}, 0.10},
		{"nested column", []string{"messages"}, 1},
		{"all columns", nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ra := &countingReaderAt{r: bytes.NewReader(data)}
			var n int
			err := ReadColumns(context.Background(), ra, size, tc.columns, func(b arrow.RecordBatch) error {
				want := tc.columns
				if want == nil {
					want = Rollouts.Columns()
				}
				if got := b.Schema().Fields(); len(got) != len(want) {
					t.Fatalf("batch has %d columns, want %v", len(got), want)
				}
				for i, name := range want {
					if b.ColumnName(i) != name {
						t.Fatalf("batch column %d is %q, want %q", i, b.ColumnName(i), name)
					}
					if !arrow.TypeEqual(b.Column(i).DataType(), fieldType(Rollouts, name)) {
						t.Fatalf("column %q has type %s", name, b.Column(i).DataType())
					}
				}
				checkBatch(t, b, rows[n:n+int(b.NumRows())])
				n += int(b.NumRows())
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n != len(rows) {
				t.Fatalf("read %d rows, want %d", n, len(rows))
			}
			t.Logf("read %d of %d bytes", ra.n.Load(), size)
			if share := float64(ra.n.Load()) / float64(size); share > tc.maxShare {
				t.Errorf("read %.0f%% of the file, want at most %.0f%%", 100*share, 100*tc.maxShare)
			}
		})
	}
}

func fieldType(table Table, name string) arrow.DataType {
	i := table.Arrow.FieldIndices(name)[0]
	return table.Arrow.Field(i).Type
}

// checkBatch compares the projected columns it knows with the source rows.
func checkBatch(t *testing.T, b arrow.RecordBatch, rows []Rollout) {
	t.Helper()
	for c := range int(b.NumCols()) {
		col := b.Column(c)
		for i, r := range rows {
			switch b.ColumnName(c) {
			case "reward":
				if v := col.(*array.Float64).Value(i); v != r.Reward {
					t.Fatalf("reward row %d = %v, want %v", i, v, r.Reward)
				}
			case "task_id":
				if v := col.(*array.String).Value(i); v != r.TaskID {
					t.Fatalf("task_id row %d = %q, want %q", i, v, r.TaskID)
				}
			case "correct":
				if v := col.(*array.Boolean).Value(i); v != r.Correct {
					t.Fatalf("correct row %d = %v", i, v)
				}
			case "messages":
				l := col.(*array.List)
				start, end := l.ValueOffsets(i)
				if int(end-start) != len(r.Messages) {
					t.Fatalf("row %d has %d messages, want %d", i, end-start, len(r.Messages))
				}
				content := l.ListValues().(*array.Struct).Field(1).(*array.String)
				if got := content.Value(int(end - 1)); got != r.Messages[len(r.Messages)-1].Content {
					t.Fatalf("row %d last message %q, want %q", i, got, r.Messages[len(r.Messages)-1].Content)
				}
			}
		}
	}
}

func TestReadColumnsUnknown(t *testing.T) {
	data := writeFile(t, Evals, WriterOptions{}, sampleEvals(5))
	err := ReadColumns(context.Background(), bytes.NewReader(data), int64(len(data)), []string{"k", "pass_at_8"}, func(arrow.RecordBatch) error {
		t.Fatal("batch delivered despite an unknown column")
		return nil
	})
	if err == nil {
		t.Fatal("unknown column accepted")
	}
	for _, s := range []string{`"pass_at_8"`, "harness_id", "mean_tokens"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}
