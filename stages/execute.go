package stages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/buildinfo"
	"github.com/whalerun/whale/storage"
)

// ErrInputsDiffer: the position holds an attempt of the stage with other
// inputs, config, seed or shard count; the error says what differs.
// Rerunning with Force writes a new attempt.
var ErrInputsDiffer = storage.ErrInputsDiffer

// ErrInputMissing: an input the stage reads is not committed yet.
var ErrInputMissing = errors.New("input not committed")

// ErrPartsMissing: Finalize found shards that have not committed.
var ErrPartsMissing = storage.ErrPartsMissing

// CommitTimeout bounds each commit step (part manifest, stage manifest).
// Commit steps run detached from the caller's context, so that an
// interrupt after the work is done still leaves a whole commit.
var CommitTimeout = 2 * time.Minute

// InputRef names an input: the current committed result of a stage at a
// position (in Run, or the executing run when Run is empty), or one exact
// stage folder or manifest by key.
type InputRef struct {
	Name     string // how the stage refers to it, e.g. "tasks"
	Run      string
	Position string
	Stage    string
	Key      string // a stage folder (runs/x/stages/r001-w01-rollout) or a dataset (datasets/nq-train); overrides Run/Position/Stage
}

// Spec is one shard execution of a stage.
type Spec struct {
	Run      string
	Position string
	Inputs   []InputRef
	Config   any // hashed as canonical JSON; must encode as JSON
	Seed     int64
	Shards   int // 0 means 1
	Shard    int
	Force    bool         // write a new attempt even if one is committed
	Log      *slog.Logger // nil means slog.Default()
	// Place labels the rows the stage writes (see Place); it is not
	// hashed.
	Place Place
}

// Result says what Execute did.
type Result struct {
	Folder      string // key of the attempt folder
	Attempt     int
	InputDigest string

	Skipped       bool  // the stage was committed with the same identity: nothing ran
	ShardSkipped  bool  // this shard's part was committed by an earlier try: Run was not called
	ShardLost     bool  // Run finished, but another try committed this shard first; this try's files are garbage
	Committed     bool  // the stage is committed; Manifest is set
	CommittedHere bool  // this call wrote _MANIFEST.json
	Missing       []int // when not committed: shards whose parts are still missing

	Manifest *storage.Manifest
	Requests storage.Stats // store requests made during the call (exact only if nothing else used the store)
	Elapsed  time.Duration
}

func (s Spec) shards() int {
	if s.Shards == 0 {
		return 1
	}
	return s.Shards
}

func (s Spec) logger(stage string) *slog.Logger {
	l := s.Log
	if l == nil {
		l = slog.Default()
	}
	return l.With("run", s.Run, "position", s.Position, "stage", stage, "shard", fmt.Sprintf("%d/%d", s.Shard, s.shards()))
}

// identify resolves spec's inputs to their committed manifests and returns
// the identity an execution of stage would have, with the manifests by
// input name.
func identify(ctx context.Context, s *storage.Store, spec Spec, stage string) (storage.Identity, map[string]*storage.Manifest, error) {
	ins := make([]storage.Input, 0, len(spec.Inputs))
	ms := make(map[string]*storage.Manifest, len(spec.Inputs))
	for _, ref := range spec.Inputs {
		m, err := resolve(ctx, s, spec.Run, ref)
		if err != nil {
			return storage.Identity{}, nil, fmt.Errorf("stage %s at %s: %w", stage, spec.Position, err)
		}
		if _, dup := ms[ref.Name]; dup {
			return storage.Identity{}, nil, fmt.Errorf("stage %s at %s: input %q given twice", stage, spec.Position, ref.Name)
		}
		ms[ref.Name] = m
		ins = append(ins, m.AsInput(ref.Name))
	}
	id, err := storage.NewIdentity(spec.Run, spec.Position, stage, ins, spec.Config, spec.Seed, spec.shards())
	if err != nil {
		return storage.Identity{}, nil, err
	}
	return id, ms, nil
}

func resolve(ctx context.Context, s *storage.Store, run string, ref InputRef) (*storage.Manifest, error) {
	var m *storage.Manifest
	var err error
	what := ref.Key
	if ref.Key != "" {
		dir := strings.TrimSuffix(strings.TrimSuffix(ref.Key, storage.ManifestName), "/")
		if name, ok := strings.CutPrefix(dir, storage.DatasetsPrefix); ok {
			m, err = storage.ReadDataset(ctx, s, name)
		} else {
			m, err = storage.ReadManifest(ctx, s, dir)
		}
	} else {
		if ref.Run != "" {
			run = ref.Run
		}
		what = fmt.Sprintf("%s-%s in run %s", ref.Position, ref.Stage, run)
		m, err = storage.LatestCommitted(ctx, s, run, ref.Position, ref.Stage)
	}
	if errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("input %q (%s): %w: %w", ref.Name, what, ErrInputMissing, err)
	}
	if err != nil {
		return nil, fmt.Errorf("input %q: %w", ref.Name, err)
	}
	return m, nil
}

func mergeOf(st Stage) storage.MergeFunc {
	if m, ok := st.(Merger); ok {
		return m.MergeSummaries
	}
	return nil
}

func commitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CommitTimeout)
}

// Execute runs shard spec.Shard of st idempotently:
//
//  1. resolve the inputs to their current committed manifests and hash the
//     identity (inputs, config, seed, shards) before anything runs;
//  2. find or start the attempt (see storage.OpenAttempt): a committed
//     identical stage returns Skipped at once;
//  3. skip the shard if its part is committed, else Run it and commit its
//     part (losing that race to another try is not an error);
//  4. commit the stage if every part is there; otherwise return with
//     Missing set, for the last shard or a Finalize job to commit.
func Execute(ctx context.Context, s *storage.Store, spec Spec, st Stage) (Result, error) {
	start, before := time.Now(), s.Stats()
	res, err := execute(ctx, s, spec, st)
	res.Elapsed, res.Requests = time.Since(start), delta(s.Stats(), before)
	return res, err
}

func execute(ctx context.Context, s *storage.Store, spec Spec, st Stage) (Result, error) {
	name := st.Name()
	log := spec.logger(name)
	if spec.Shard < 0 || spec.Shard >= spec.shards() {
		return Result{}, fmt.Errorf("stage %s at %s: shard %d out of range 0..%d", name, spec.Position, spec.Shard, spec.shards()-1)
	}
	id, inputs, err := identify(ctx, s, spec, name)
	if err != nil {
		return Result{}, err
	}
	opts := storage.AttemptOptions{Force: spec.Force, Merge: mergeOf(st), WhaleVersion: buildinfo.Version()}
	a, err := storage.OpenAttempt(ctx, s, id, opts)
	if err != nil {
		return Result{InputDigest: id.InputDigest}, err
	}
	res := Result{Folder: a.Dir, Attempt: a.Folder.Attempt, InputDigest: id.InputDigest}
	log = log.With("attempt", a.Folder.Attempt)
	if a.Committed != nil {
		log.Info("stage already committed with the same inputs; nothing to do", "folder", a.Dir)
		res.Skipped, res.Committed, res.Manifest = true, true, a.Committed
		return res, nil
	}
	done, err := a.PartCommitted(ctx, spec.Shard)
	if err != nil {
		return res, err
	}
	if done {
		log.Info("shard already committed by an earlier try; not running it again")
		res.ShardSkipped = true
	} else {
		lost, err := runShard(ctx, s, a, spec, st, inputs, log)
		if err != nil {
			return res, err
		}
		res.ShardLost = lost
	}
	cctx, cancel := commitContext(ctx)
	defer cancel()
	m, won, err := a.Commit(cctx)
	var mp *storage.MissingPartsError
	if errors.As(err, &mp) {
		log.Info("shard committed; the stage commits when the other shards have", "missing", len(mp.Missing))
		res.Missing = mp.Missing
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Committed, res.CommittedHere, res.Manifest = true, won, m
	if won {
		log.Info("stage committed", "folder", a.Dir, "files", len(m.Files))
	}
	return res, nil
}

// runShard runs one try of a shard and commits its part. lost reports that
// another try committed the shard first.
func runShard(ctx context.Context, s *storage.Store, a *storage.Attempt, spec Spec, st Stage, inputs map[string]*storage.Manifest, log *slog.Logger) (lost bool, err error) {
	sw, err := a.NewShard(spec.Shard)
	if err != nil {
		return false, err
	}
	x := &Exec{Run: spec.Run, Position: spec.Position, Stage: st.Name(), Attempt: a.Folder.Attempt,
		Shard: spec.Shard, Shards: a.Identity.Shards, Seed: spec.Seed, Config: spec.Config, Inputs: inputs,
		Place: spec.Place, Log: log, store: s, shard: sw, config: a.Identity.Config}
	if err := call(ctx, st, x); err != nil {
		sw.Abort()
		return false, fmt.Errorf("stage %s at %s, shard %d of %d: %w", st.Name(), spec.Position, spec.Shard, x.Shards, err)
	}
	cctx, cancel := commitContext(ctx)
	defer cancel()
	won, err := sw.Commit(cctx)
	if err != nil {
		sw.Abort()
		return false, err
	}
	if !won {
		log.Warn("another try committed this shard first; this try's files are left as garbage", "token", sw.Token())
	}
	return !won, nil
}

// call runs the stage, turning a panic into an error so that the shard's
// open files are discarded and the caller sees where it happened.
func call(ctx context.Context, st Stage, x *Exec) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return st.Run(ctx, x)
}

// Finalize commits the attempt of st whose identity spec describes, for a
// commit job that runs after the shards: it never runs a shard and never
// starts an attempt. A committed attempt is returned as is; missing shards
// give a *storage.MissingPartsError (errors.Is(err, ErrPartsMissing)).
func Finalize(ctx context.Context, s *storage.Store, spec Spec, st Stage) (Result, error) {
	start, before := time.Now(), s.Stats()
	res, err := finalize(ctx, s, spec, st)
	res.Elapsed, res.Requests = time.Since(start), delta(s.Stats(), before)
	return res, err
}

func finalize(ctx context.Context, s *storage.Store, spec Spec, st Stage) (Result, error) {
	id, _, err := identify(ctx, s, spec, st.Name())
	if err != nil {
		return Result{}, err
	}
	a, err := storage.FindAttempt(ctx, s, id, storage.AttemptOptions{Merge: mergeOf(st), WhaleVersion: buildinfo.Version()})
	if err != nil {
		return Result{InputDigest: id.InputDigest}, err
	}
	res := Result{Folder: a.Dir, Attempt: a.Folder.Attempt, InputDigest: id.InputDigest}
	if a.Committed != nil {
		res.Skipped, res.Committed, res.Manifest = true, true, a.Committed
		return res, nil
	}
	cctx, cancel := commitContext(ctx)
	defer cancel()
	m, won, err := a.Commit(cctx)
	var mp *storage.MissingPartsError
	if errors.As(err, &mp) {
		res.Missing = mp.Missing
	}
	if err != nil {
		return res, err
	}
	res.Committed, res.CommittedHere, res.Manifest = true, won, m
	spec.logger(st.Name()).Info("stage committed", "folder", a.Dir, "files", len(m.Files), "by_this_job", won)
	return res, nil
}

func delta(a, b storage.Stats) storage.Stats {
	return storage.Stats{Reads: a.Reads - b.Reads, Writes: a.Writes - b.Writes, Lists: a.Lists - b.Lists,
		Stats: a.Stats - b.Stats, Deletes: a.Deletes - b.Deletes}
}
