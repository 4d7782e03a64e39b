package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// The commit protocol, per attempt folder runs/<run>/stages/<folder>/:
//
//  1. _INPUTS.json   CreateExclusive before any work: the attempt's identity.
//     Every later shard or try checks that its identity matches.
//  2. data files     uploaded under names unique per shard and try.
//  3. _parts/<i>-of-<N>.json  CreateExclusive when shard i has uploaded its
//     files: of two tries of one shard exactly one commits; the other's
//     files are garbage.
//  4. _MANIFEST.json CreateExclusive once all N parts exist: the commit
//     point. Before it, readers see nothing; after it, only what it names.

// Sentinel errors of the protocol; test with errors.Is.
var (
	// ErrInputsDiffer: the position already holds an attempt of this stage
	// with different inputs, config, seed or shard count.
	ErrInputsDiffer = errors.New("stage inputs differ")
	// ErrPartsMissing: a stage commit was asked for before every shard
	// committed its part.
	ErrPartsMissing = errors.New("shards missing")
)

// DiffError says how an execution differs from the attempt already at its
// position. errors.Is(err, ErrInputsDiffer) holds.
type DiffError struct {
	Run       string
	Folder    Folder   // the attempt compared against
	Committed bool     // whether that attempt is committed
	Diffs     []string // e.g. "config.threshold: 0.5 → 0.7"
	Next      int      // the attempt --force would start
}

func (e *DiffError) Error() string {
	what := strings.Join(e.Diffs, "; ")
	if e.Committed {
		return fmt.Sprintf("%s in run %s is committed (attempt %d) with different inputs: %s; rerun with --force to write attempt %d and keep attempt %d",
			e.Folder.Position+"-"+e.Folder.Stage, e.Run, e.Folder.Attempt, what, e.Next, e.Folder.Attempt)
	}
	return fmt.Sprintf("%s in run %s was started with different inputs and is not committed: %s; rerun with the inputs it was started with to resume it, or with --force to start attempt %d",
		e.Folder, e.Run, what, e.Next)
}

// Is makes errors.Is(err, ErrInputsDiffer) true.
func (e *DiffError) Is(target error) bool { return target == ErrInputsDiffer }

// MissingPartsError lists the shards whose part manifests are missing.
// errors.Is(err, ErrPartsMissing) holds.
type MissingPartsError struct {
	Dir     string
	Shards  int
	Missing []int
}

func (e *MissingPartsError) Error() string {
	return fmt.Sprintf("commit %s: %d of %d shard(s) have not committed their part: shard %s; run them (or rerun the failed ones) and commit again",
		e.Dir, len(e.Missing), e.Shards, ranges(e.Missing))
}

// Is makes errors.Is(err, ErrPartsMissing) true.
func (e *MissingPartsError) Is(target error) bool { return target == ErrPartsMissing }

// ranges renders sorted ints compactly: "0, 3-5, 9".
func ranges(xs []int) string {
	var b strings.Builder
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(xs[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(xs[j]))
		}
		i = j + 1
	}
	return b.String()
}

// MergeFunc merges the shards' summaries into the stage's. parts[i] is
// shard i's summary as decoded from JSON (numbers are float64); it is
// never nil.
type MergeFunc func(parts []map[string]any) (map[string]any, error)

// MergeSum is the default MergeFunc: a single shard's summary is kept as
// is; with several, numbers are added and any other value must be the same
// in every shard that sets it. Means and rates do not add up: a stage that
// reports them across shards should report sums and counts, or merge
// itself.
func MergeSum(parts []map[string]any) (map[string]any, error) {
	if len(parts) == 1 {
		return parts[0], nil
	}
	out := map[string]any{}
	var keys []string
	for _, p := range parts {
		for k := range p {
			if _, ok := out[k]; !ok {
				out[k] = nil
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		var sum float64
		allNum, first, set := true, any(nil), false
		for i, p := range parts {
			v, ok := p[k]
			if !ok {
				continue
			}
			if f, isNum := v.(float64); isNum {
				sum += f
			} else {
				allNum = false
			}
			if !set {
				first, set = v, true
			} else if !allNum && !reflect.DeepEqual(first, v) {
				return nil, fmt.Errorf("summary %q: shard %d has %v where an earlier shard has %v, and the stage does not merge summaries itself", k, i, v, first)
			}
		}
		if allNum {
			out[k] = sum
		} else {
			out[k] = first
		}
	}
	return out, nil
}

// AttemptOptions tune OpenAttempt, FindAttempt and Finalize.
type AttemptOptions struct {
	// Force starts a new attempt above the latest committed one, keeping
	// the old. Shards of one forced execution join the same new attempt
	// while it is uncommitted and its identity matches.
	Force bool
	// Merge merges shard summaries at the stage commit; nil means MergeSum.
	Merge MergeFunc
	// WhaleVersion is recorded in every protocol file written.
	WhaleVersion string
}

// Attempt is one attempt folder of a stage execution, opened for a known
// identity.
type Attempt struct {
	Folder    Folder
	Dir       string // key of the stage folder
	Identity  Identity
	Committed *Manifest // non-nil: already committed with this identity; nothing to do
	Resumed   bool      // the attempt was started earlier (by another shard or try)
	Created   time.Time // when its _INPUTS.json was written

	s     *Store
	opts  AttemptOptions
	mu    sync.Mutex
	known map[int]*PartManifest // parts this process committed, to save reads
}

type inputsFile struct {
	Format string `json:"format"`
	Identity
	Attempt      int       `json:"attempt"`
	Created      time.Time `json:"created"`
	Host         string    `json:"host,omitempty"`
	WhaleVersion string    `json:"whale_version,omitempty"`
}

func readInputs(ctx context.Context, s *Store, dir string) (*inputsFile, error) {
	key := dir + "/" + InputsName
	data, err := s.ReadAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	var in inputsFile
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if in.Format != inputsFormat {
		return nil, fmt.Errorf("read %s: format %q is not %q", key, in.Format, inputsFormat)
	}
	if err := in.Identity.check(); err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return &in, nil
}

var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

func now() time.Time { return time.Now().UTC() }

// OpenAttempt decides where an execution with identity id goes, before
// anything runs:
//
//   - the latest committed attempt has the same identity: Committed is set
//     and there is nothing to do (one list and one read);
//   - it has a different identity: a *DiffError, unless opts.Force;
//   - an uncommitted attempt above it has the same identity: it is resumed;
//     with a different identity: a *DiffError unless opts.Force;
//   - otherwise a new attempt is created by writing its _INPUTS.json with
//     CreateExclusive (attempt 1, or one above the highest existing).
func OpenAttempt(ctx context.Context, s *Store, id Identity, opts AttemptOptions) (*Attempt, error) {
	if err := id.check(); err != nil {
		return nil, fmt.Errorf("open attempt of %s at %s: %w", id.Stage, id.Position, err)
	}
	run := id.Run
	fs, err := listAttempts(ctx, s, run, id.Position, id.Stage)
	if err != nil {
		return nil, err
	}
	next := 1
	if len(fs) > 0 {
		next = fs[len(fs)-1].Attempt + 1
	}
	var committed *Manifest
	var pending []Folder // above the latest committed, newest first
	for i := len(fs) - 1; i >= 0; i-- {
		m, err := ReadManifest(ctx, s, fs[i].Key(run))
		if err == nil {
			committed = m
			break
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		pending = append(pending, fs[i])
	}
	if committed != nil && !opts.Force {
		if committed.InputDigest == id.InputDigest {
			return &Attempt{Folder: committed.Folder(), Dir: committed.Dir, Identity: id, Committed: committed,
				Created: committed.Started, s: s, opts: opts}, nil
		}
		return nil, &DiffError{Run: run, Folder: committed.Folder(), Committed: true, Diffs: id.Diff(committed.Identity), Next: next}
	}
	if len(pending) > 0 {
		top := pending[0]
		in, err := readInputs(ctx, s, top.Key(run))
		switch {
		case err == nil && in.InputDigest == id.InputDigest:
			return &Attempt{Folder: top, Dir: top.Key(run), Identity: id, Resumed: true, Created: in.Created, s: s, opts: opts}, nil
		case err == nil && !opts.Force:
			return nil, &DiffError{Run: run, Folder: top, Diffs: id.Diff(in.Identity), Next: next}
		case err != nil && !errors.Is(err, ErrNotFound):
			return nil, err
		}
		// A folder without an identity holds only garbage: start above it.
	}
	return createAttempt(ctx, s, id, next, opts)
}

func createAttempt(ctx context.Context, s *Store, id Identity, n int, opts AttemptOptions) (*Attempt, error) {
	for range 8 {
		f := Folder{Position: id.Position, Stage: id.Stage, Attempt: n}
		dir := f.Key(id.Run)
		created := now()
		data, err := json.MarshalIndent(inputsFile{Format: inputsFormat, Identity: id, Attempt: n, Created: created,
			Host: hostname(), WhaleVersion: opts.WhaleVersion}, "", "  ")
		if err != nil {
			return nil, err
		}
		err = s.CreateExclusive(ctx, dir+"/"+InputsName, data)
		if err == nil {
			return &Attempt{Folder: f, Dir: dir, Identity: id, Created: created, s: s, opts: opts}, nil
		}
		if !errors.Is(err, ErrExists) {
			return nil, fmt.Errorf("start attempt %s: %w", dir, err)
		}
		// Another shard or process started this attempt a moment ago.
		in, err := readInputs(ctx, s, dir)
		if err != nil {
			return nil, err
		}
		if in.InputDigest == id.InputDigest {
			return &Attempt{Folder: f, Dir: dir, Identity: id, Resumed: true, Created: in.Created, s: s, opts: opts}, nil
		}
		if !opts.Force {
			return nil, &DiffError{Run: id.Run, Folder: f, Diffs: id.Diff(in.Identity), Next: n + 1}
		}
		n++
	}
	return nil, fmt.Errorf("start attempt of %s-%s in run %s: too many concurrent attempts", id.Position, id.Stage, id.Run)
}

// FindAttempt returns the newest attempt whose identity is id, committed
// (Committed set) or not, without creating anything; a commit job uses it.
// With none, the error errors.Is(err, ErrNotFound).
func FindAttempt(ctx context.Context, s *Store, id Identity, opts AttemptOptions) (*Attempt, error) {
	fs, err := listAttempts(ctx, s, id.Run, id.Position, id.Stage)
	if err != nil {
		return nil, err
	}
	for i := len(fs) - 1; i >= 0; i-- {
		dir := fs[i].Key(id.Run)
		m, err := ReadManifest(ctx, s, dir)
		if err == nil {
			if m.InputDigest == id.InputDigest {
				return &Attempt{Folder: fs[i], Dir: dir, Identity: id, Committed: m, Created: m.Started, s: s, opts: opts}, nil
			}
			continue
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		in, err := readInputs(ctx, s, dir)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if in.InputDigest == id.InputDigest {
			return &Attempt{Folder: fs[i], Dir: dir, Identity: id, Resumed: true, Created: in.Created, s: s, opts: opts}, nil
		}
	}
	return nil, fmt.Errorf("%s-%s in run %s has no attempt with input digest %s: %w", id.Position, id.Stage, id.Run, short(id.InputDigest), ErrNotFound)
}

// Finalize commits the newest attempt of a stage at a position, for a
// commit job that runs after the shards (a Slurm dependency): it returns
// the manifest when that attempt is committed already, commits it when all
// its parts exist, and otherwise returns a *MissingPartsError.
func Finalize(ctx context.Context, s *Store, run, position, stage string, opts AttemptOptions) (*Manifest, error) {
	fs, err := listAttempts(ctx, s, run, position, stage)
	if err != nil {
		return nil, err
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("commit %s-%s in run %s: no attempt has started: %w", position, stage, run, ErrNotFound)
	}
	top := fs[len(fs)-1]
	dir := top.Key(run)
	if m, err := ReadManifest(ctx, s, dir); err == nil || !errors.Is(err, ErrNotFound) {
		return m, err
	}
	in, err := readInputs(ctx, s, dir)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", dir, err)
	}
	a := &Attempt{Folder: top, Dir: dir, Identity: in.Identity, Resumed: true, Created: in.Created, s: s, opts: opts}
	m, _, err := a.Commit(ctx)
	return m, err
}

func (a *Attempt) partKey(shard int) string {
	return a.Dir + "/" + PartManifestName(shard, a.Identity.Shards)
}

// PartCommitted reports whether shard has committed its part (one stat).
func (a *Attempt) PartCommitted(ctx context.Context, shard int) (bool, error) {
	ok, err := a.s.Exists(ctx, a.partKey(shard))
	if err != nil {
		return false, fmt.Errorf("check part of shard %d: %w", shard, err)
	}
	return ok, nil
}

// NewShard starts one try of shard: its files get a fresh random token.
func (a *Attempt) NewShard(shard int) (*ShardWriter, error) {
	if shard < 0 || shard >= a.Identity.Shards {
		return nil, fmt.Errorf("%s: shard %d out of range 0..%d", a.Dir, shard, a.Identity.Shards-1)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	return &ShardWriter{a: a, shard: shard, token: hex.EncodeToString(rnd[:]), started: now(),
		open: map[*PartWriter]bool{}, seq: map[string]int{}, summary: map[string]any{}}, nil
}

// ShardWriter is one try of one shard: it creates the shard's data files
// and commits its part manifest. It is safe for concurrent use.
type ShardWriter struct {
	a       *Attempt
	shard   int
	token   string
	started time.Time

	mu      sync.Mutex
	open    map[*PartWriter]bool
	files   []FileEntry
	failed  []string
	seq     map[string]int
	summary map[string]any
	done    bool
}

// Token is the random token in this try's file names.
func (w *ShardWriter) Token() string { return w.token }

// Create starts a data file of table (e.g. "rollouts") with extension ext
// (e.g. "parquet"), named <table>-<shard>-of-<shards>.<token>[.<seq>].<ext>.
// A table may have several files per shard. ctx bounds the upload at
// Close.
func (w *ShardWriter) Create(ctx context.Context, table, ext string) (*PartWriter, error) {
	if !tableRE.MatchString(table) || len(table) > 64 {
		return nil, fmt.Errorf("create file in %s: invalid table name %q: want lowercase letters, digits and '_'", w.a.Dir, table)
	}
	if !extRE.MatchString(ext) || len(ext) > 16 {
		return nil, fmt.Errorf("create file in %s: invalid extension %q", w.a.Dir, ext)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, fmt.Errorf("create %s file in %s: shard %d is already committed or aborted", table, w.a.Dir, w.shard)
	}
	n := w.seq[table]
	w.seq[table] = n + 1
	name := PartFileName(table, w.shard, w.a.Identity.Shards, w.token, n, ext)
	pw, err := w.a.s.NewPartWriter(ctx, w.a.Dir+"/"+name)
	if err != nil {
		return nil, err
	}
	pw.table, pw.shard = table, w.shard
	pw.onDone = w.partDone
	w.open[pw] = true
	return pw, nil
}

func (w *ShardWriter) partDone(pw *PartWriter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.open, pw)
	switch {
	case pw.err == nil:
		w.files = append(w.files, pw.entry)
	case !pw.aborted: // an abandoned file is the caller's choice, a failed upload is not
		w.failed = append(w.failed, pw.key)
	}
}

// SetSummary records one summary statistic of this shard; v must encode
// as JSON.
func (w *ShardWriter) SetSummary(key string, v any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.summary[key] = v
}

// Commit writes the shard's part manifest with CreateExclusive. won is
// false when another try of the same shard committed first: that is not an
// error, but this try's files are garbage. Every file must be closed.
func (w *ShardWriter) Commit(ctx context.Context) (won bool, err error) {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return false, fmt.Errorf("commit shard %d of %s: already committed or aborted", w.shard, w.a.Dir)
	}
	if len(w.open) > 0 {
		var names []string
		for pw := range w.open {
			names = append(names, pw.key)
		}
		sort.Strings(names)
		w.mu.Unlock()
		return false, fmt.Errorf("commit shard %d of %s: file(s) not closed: %s", w.shard, w.a.Dir, strings.Join(names, ", "))
	}
	if len(w.failed) > 0 {
		w.mu.Unlock()
		return false, fmt.Errorf("commit shard %d of %s: file(s) failed to upload: %s", w.shard, w.a.Dir, strings.Join(w.failed, ", "))
	}
	w.done = true
	files := append([]FileEntry(nil), w.files...)
	summary := w.summary
	w.mu.Unlock()

	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	id := w.a.Identity
	pm := PartManifest{Format: partFormat, Run: id.Run, Position: id.Position, Stage: id.Stage,
		Attempt: w.a.Folder.Attempt, Shard: w.shard, Shards: id.Shards, InputDigest: id.InputDigest,
		Token: w.token, Files: files, Summary: summary, Started: w.started, Finished: now(),
		Host: hostname(), WhaleVersion: w.a.opts.WhaleVersion}
	if pm.Files == nil {
		pm.Files = []FileEntry{}
	}
	data, err := json.MarshalIndent(pm, "", "  ")
	if err != nil {
		return false, fmt.Errorf("commit shard %d of %s: encode part manifest (summary values must encode as JSON): %w", w.shard, w.a.Dir, err)
	}
	key := w.a.partKey(w.shard)
	if err := w.a.s.CreateExclusive(ctx, key, data); err != nil {
		if errors.Is(err, ErrExists) {
			return false, nil
		}
		return false, fmt.Errorf("commit shard %d: %w", w.shard, err)
	}
	// Keep the decoded form, as a reader would see it, for the stage commit.
	var back PartManifest
	if err := json.Unmarshal(data, &back); err == nil {
		w.a.mu.Lock()
		if w.a.known == nil {
			w.a.known = map[int]*PartManifest{}
		}
		w.a.known[w.shard] = &back
		w.a.mu.Unlock()
	}
	return true, nil
}

// Abort discards the files still open; files already uploaded stay as
// garbage that no manifest names.
func (w *ShardWriter) Abort() {
	w.mu.Lock()
	w.done = true
	open := make([]*PartWriter, 0, len(w.open))
	for pw := range w.open {
		open = append(open, pw)
	}
	w.mu.Unlock()
	for _, pw := range open {
		pw.Abort()
	}
}

// Commit writes the stage manifest if every shard has committed its part:
// it lists _parts/, reads the part manifests it did not write itself,
// merges them, and creates _MANIFEST.json with CreateExclusive. won is
// false when the attempt was committed already, by this call's rival or
// earlier; the manifest returned is then the one in the store. With parts
// missing the error is a *MissingPartsError.
func (a *Attempt) Commit(ctx context.Context) (m *Manifest, won bool, err error) {
	if a.Committed != nil {
		return a.Committed, false, nil
	}
	n := a.Identity.Shards
	parts := make([]*PartManifest, n)
	a.mu.Lock()
	have := 0
	for i, p := range a.known {
		parts[i] = p
		have++
	}
	a.mu.Unlock()
	if have < n {
		present := make([]bool, n)
		prefix := a.Dir + "/" + PartsDir + "/"
		err := a.s.List(ctx, prefix, false, func(e Entry) error {
			mm := partNameRE.FindStringSubmatch(strings.TrimPrefix(e.Key, prefix))
			if mm == nil {
				return nil
			}
			i, _ := strconv.Atoi(mm[1])
			total, _ := strconv.Atoi(mm[2])
			if total == n && i < n {
				present[i] = true
			}
			return nil
		})
		if err != nil {
			return nil, false, fmt.Errorf("commit %s: %w", a.Dir, err)
		}
		var missing []int
		for i, ok := range present {
			if !ok && parts[i] == nil {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			return nil, false, &MissingPartsError{Dir: a.Dir, Shards: n, Missing: missing}
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(parallelReads)
		for i := range n {
			if parts[i] != nil {
				continue
			}
			g.Go(func() error {
				if err := gctx.Err(); err != nil {
					return err
				}
				key := a.partKey(i)
				data, err := a.s.ReadAll(gctx, key)
				if err != nil {
					return fmt.Errorf("read part manifest %s: %w", key, err)
				}
				var p PartManifest
				if err := json.Unmarshal(data, &p); err != nil {
					return fmt.Errorf("read part manifest %s: %w", key, err)
				}
				parts[i] = &p
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, false, fmt.Errorf("commit %s: %w", a.Dir, err)
		}
	}
	m, data, err := a.merge(parts)
	if err != nil {
		return nil, false, err
	}
	key := a.Dir + "/" + ManifestName
	if err := a.s.CreateExclusive(ctx, key, data); err != nil {
		if errors.Is(err, ErrExists) {
			m, err := ReadManifest(ctx, a.s, a.Dir)
			if err != nil {
				return nil, false, err
			}
			a.Committed = m
			return m, false, nil
		}
		return nil, false, fmt.Errorf("commit %s: %w", a.Dir, err)
	}
	m.Dir, m.Key, m.Digest = a.Dir, key, DigestBytes(data)
	a.Committed = m
	return m, true, nil
}

func (a *Attempt) merge(parts []*PartManifest) (*Manifest, []byte, error) {
	id := a.Identity
	m := &Manifest{Format: manifestFormat, Identity: id, Attempt: a.Folder.Attempt, Files: []FileEntry{},
		Started: a.Created, Finished: now(), WhaleVersion: a.opts.WhaleVersion}
	sums := make([]map[string]any, len(parts))
	seen := map[string]bool{}
	for i, p := range parts {
		key := a.partKey(i)
		switch {
		case p.Format != partFormat:
			return nil, nil, fmt.Errorf("commit %s: part %s has format %q, not %q", a.Dir, key, p.Format, partFormat)
		case p.Shard != i || p.Shards != id.Shards:
			return nil, nil, fmt.Errorf("commit %s: part %s says shard %d of %d", a.Dir, key, p.Shard, p.Shards)
		case p.InputDigest != id.InputDigest || p.Attempt != a.Folder.Attempt:
			return nil, nil, fmt.Errorf("commit %s: part %s belongs to attempt %d with input digest %s, not attempt %d with %s",
				a.Dir, key, p.Attempt, short(p.InputDigest), a.Folder.Attempt, short(id.InputDigest))
		}
		var rows int64
		for _, f := range p.Files {
			if f.Name == "" || strings.Contains(f.Name, "/") || seen[f.Name] {
				return nil, nil, fmt.Errorf("commit %s: part %s lists a bad or repeated file name %q", a.Dir, key, f.Name)
			}
			seen[f.Name] = true
			rows += f.Rows
			m.Files = append(m.Files, f)
		}
		sums[i] = p.Summary
		if sums[i] == nil {
			sums[i] = map[string]any{}
		}
		m.Parts = append(m.Parts, PartInfo{Shard: i, Token: p.Token, Files: len(p.Files), Rows: rows,
			Summary: p.Summary, Started: p.Started, Finished: p.Finished, Host: p.Host, WhaleVersion: p.WhaleVersion})
		if m.Started.IsZero() || p.Started.Before(m.Started) {
			m.Started = p.Started
		}
	}
	merge := a.opts.Merge
	if merge == nil {
		merge = MergeSum
	}
	summary, err := merge(sums)
	if err != nil {
		return nil, nil, fmt.Errorf("commit %s: merge summaries: %w", a.Dir, err)
	}
	m.Summary = summary
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("commit %s: encode manifest: %w", a.Dir, err)
	}
	// Hand back exactly what a reader will decode.
	back, err := DecodeManifest(data)
	if err != nil {
		return nil, nil, fmt.Errorf("commit %s: manifest does not decode: %w", a.Dir, err)
	}
	return back, data, nil
}
