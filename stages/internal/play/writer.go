package play

import (
	"context"
	"fmt"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// RolloutWriter streams rollout rows into one stage file. Memory is one
// row group, whatever the number of episodes.
type RolloutWriter struct {
	pw *storage.PartWriter
	w  *schemas.Writer[schemas.Rollout]
}

// RowGroupRows caps the rows of a rollouts row group. Rows with messages
// and traces are large, so a row group is cut by bytes long before this;
// for tiny rows it keeps the writer's buffer small.
const RowGroupRows = 4096

// NewRolloutWriter starts file (e.g. "rollouts.parquet") of x's shard.
func NewRolloutWriter(ctx context.Context, x *stages.Exec, file string, meta map[string]string) (*RolloutWriter, error) {
	pw, err := x.Create(ctx, file)
	if err != nil {
		return nil, err
	}
	w, err := schemas.NewWriter[schemas.Rollout](pw, schemas.Rollouts, schemas.WriterOptions{RowGroupRows: RowGroupRows, Metadata: meta})
	if err != nil {
		pw.Abort()
		return nil, fmt.Errorf("write %s: %w", pw.Key(), err)
	}
	return &RolloutWriter{pw: pw, w: w}, nil
}

// Write appends one row.
func (w *RolloutWriter) Write(r schemas.Rollout) error {
	if err := w.w.Write(r); err != nil {
		return fmt.Errorf("write %s: %w", w.pw.Key(), err)
	}
	return nil
}

// Rows is the number of rows written.
func (w *RolloutWriter) Rows() int64 { return w.w.Rows() }

// Close finishes the file and uploads it.
func (w *RolloutWriter) Close() error {
	if err := w.w.Close(); err != nil {
		w.pw.Abort()
		return fmt.Errorf("write %s: %w", w.pw.Key(), err)
	}
	if _, err := w.pw.Finish(w.w.Rows()); err != nil {
		return fmt.Errorf("upload %s: %w", w.pw.Key(), err)
	}
	return nil
}

// Abort discards the file.
func (w *RolloutWriter) Abort() { w.pw.Abort() }

// Meta is the footer metadata of a stage's files: where they come from.
func Meta(x *stages.Exec) map[string]string {
	return map[string]string{"whale.run": x.Run, "whale.position": x.Position, "whale.stage": x.Stage}
}
