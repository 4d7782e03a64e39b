package stages

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/whalerun/whale/storage"
)

// Stage is one kind of pipeline step. Run computes one shard of it from
// x's inputs and config, writing its output through x.Create. It returns
// an error to fail the shard; nothing it wrote becomes visible then.
type Stage interface {
	Name() string // lowercase letters, e.g. "rollout"
	Run(ctx context.Context, x *Exec) error
}

// Merger is implemented by stages whose shard summaries do not simply add
// up (means, maxima): it merges them at the stage commit. parts[i] is
// shard i's summary as decoded from JSON (numbers are float64). Stages
// without it get storage.MergeSum.
type Merger interface {
	MergeSummaries(parts []map[string]any) (map[string]any, error)
}

// Place says where a stage execution sits in its run's plan, in words a
// reader of its rows groups by without parsing positions (the position
// grammar is the planner's, and a stage does not import the planner).
// It is a label, not part of the stage's identity: it follows from the
// run's frozen spec and the position, which are, and a stage must not
// compute anything differently because of it. The zero value means
// unknown (a stage run outside a planned run): rows then say schedule ""
// and round -1.
type Place struct {
	Schedule string // the run's schedule, e.g. "whale" or "weights-only"
	Round    int    // the alternation round of the position; 0 for r000-t
	Section  string // "weight", "harness" or "test"
}

// Exec is what a running shard sees: where it runs, its inputs and config,
// and where to write. It is valid only during Run.
type Exec struct {
	Run      string
	Position string
	Stage    string
	Attempt  int
	Shard    int // 0 ≤ Shard < Shards
	Shards   int
	Seed     int64
	// Config is Spec.Config as given to Execute; DecodeConfig decodes its
	// canonical JSON form into another type.
	Config any
	// Inputs are the committed manifests of the stage's inputs, by name.
	Inputs map[string]*storage.Manifest
	// Place is Spec.Place: where the execution sits in its run's plan.
	Place Place
	Log   *slog.Logger

	store  *storage.Store
	shard  *storage.ShardWriter
	config []byte
}

// DecodeConfig decodes the config, as hashed, into v.
func (x *Exec) DecodeConfig(v any) error {
	if err := json.Unmarshal(x.config, v); err != nil {
		return fmt.Errorf("stage %s: decode config: %w", x.Stage, err)
	}
	return nil
}

// Input returns the manifest of the input called name.
func (x *Exec) Input(name string) (*storage.Manifest, error) {
	m := x.Inputs[name]
	if m == nil {
		return nil, fmt.Errorf("stage %s: no input called %q (the spec declares %s)", x.Stage, name, inputNames(x.Inputs))
	}
	return m, nil
}

func inputNames(in map[string]*storage.Manifest) string {
	var names []string
	for k := range in {
		names = append(names, k)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Open gives random access to one file of an input (e.g. for a Parquet
// reader).
func (x *Exec) Open(ctx context.Context, in *storage.Manifest, f storage.FileEntry) (*storage.ReaderAt, error) {
	return in.OpenFile(ctx, x.store, f)
}

// NewReader streams one file of an input.
func (x *Exec) NewReader(ctx context.Context, in *storage.Manifest, f storage.FileEntry) (io.ReadCloser, error) {
	return in.NewFileReader(ctx, x.store, f)
}

// Create starts an output file. file is "<table>.<ext>", e.g.
// "rollouts.parquet"; the stored name adds the shard and a per-try token.
// Close the writer (after SetRows) to upload it; a table may have several
// files. The upload runs under ctx.
func (x *Exec) Create(ctx context.Context, file string) (*storage.PartWriter, error) {
	table, ext, ok := strings.Cut(file, ".")
	if !ok {
		return nil, fmt.Errorf("stage %s: create %q: want <table>.<ext>, e.g. rollouts.parquet", x.Stage, file)
	}
	return x.shard.Create(ctx, table, ext)
}

// SetSummary records a summary statistic of this shard for the manifest
// (and the planner). v must encode as JSON.
func (x *Exec) SetSummary(key string, v any) { x.shard.SetSummary(key, v) }
