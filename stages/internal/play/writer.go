package play

import (
	"cmp"
	"context"
	"fmt"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// RolloutWriter streams rollout rows into one stage file. Memory is one
// row group, whatever the number of episodes.
type RolloutWriter struct {
	pw    *storage.PartWriter
	w     *schemas.Writer[schemas.Rollout]
	place schemas.Rollout // the columns that say where the episodes ran
}

// Sections of a rollouts row (schemas.Rollout.Section): what a stage
// that was not told its place knows it computes.
const (
	SectionWeight  = "weight"  // a weight step's training rollouts
	SectionHarness = "harness" // a harness iteration's search-set evaluation
	SectionTest    = "test"    // a test of a (model, harness) pair
)

// RowGroupRows caps the rows of a rollouts row group. Rows with messages
// and traces are large, so a row group is cut by bytes long before this;
// for tiny rows it keeps the writer's buffer small.
const RowGroupRows = 4096

// NewRolloutWriter starts file (e.g. "rollouts.parquet") of x's shard.
// Every row it writes gets the columns that say where the episode ran:
// the schedule and round of x.Place (round -1 when x.Place gives neither),
// its section or else section (what the stage knows it computes), and
// x.Stage.
func NewRolloutWriter(ctx context.Context, x *stages.Exec, file string, meta map[string]string, section string) (*RolloutWriter, error) {
	place := schemas.Rollout{Schedule: x.Place.Schedule, Round: int32(x.Place.Round), Section: cmp.Or(x.Place.Section, section), Stage: x.Stage}
	if x.Place.Schedule == "" && x.Place.Round == 0 {
		place.Round = -1 // not told: not the initial pair's round 0
	}
	pw, err := x.Create(ctx, file)
	if err != nil {
		return nil, err
	}
	w, err := schemas.NewWriter[schemas.Rollout](pw, schemas.Rollouts, schemas.WriterOptions{RowGroupRows: RowGroupRows, Metadata: meta})
	if err != nil {
		pw.Abort()
		return nil, fmt.Errorf("write %s: %w", pw.Key(), err)
	}
	return &RolloutWriter{pw: pw, w: w, place: place}, nil
}

// Write appends one row, with the writer's place columns.
func (w *RolloutWriter) Write(r schemas.Rollout) error {
	r.Schedule, r.Round, r.Section, r.Stage = w.place.Schedule, w.place.Round, w.place.Section, w.place.Stage
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
