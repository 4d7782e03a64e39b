package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// A Collection is a key prefix of named folders committed like stage
// folders: <Prefix><name>/ holds the data files and a _MANIFEST.json in the
// stage manifest format, written last with CreateExclusive. A folder is
// never rewritten: other content under a taken name is refused. Datasets
// are one collection; search indexes (domains/searchqa) are another.
type Collection struct {
	Prefix string // key prefix, ending in "/"
	Stage  string // the stage name its manifests record (CheckStage)
	Noun   string // what one folder is called in messages
}

// Datasets are task tables brought in from outside (whale data import) and
// shared by runs, under datasets/<name>/.
var Datasets = Collection{Prefix: DatasetsPrefix, Stage: "import", Noun: "dataset"}

// DatasetsPrefix is the key prefix of all datasets.
const DatasetsPrefix = "datasets/"

// ErrDatasetDiffers is matched by the error a collection's NewWriter or
// Commit returns when the name is taken by a folder made from other data.
var ErrDatasetDiffers = errors.New("dataset exists with other content")

// DatasetDir is the folder key of dataset name.
func DatasetDir(name string) string { return Datasets.Dir(name) }

// Dir is the folder key of name.
func (c Collection) Dir(name string) string { return c.Prefix + name }

// datasetRE is the form of a collection's folder name.
var datasetRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// CheckDataset reports whether name can name a dataset.
func CheckDataset(name string) error { return Datasets.Check(name) }

// Check reports whether name can name a folder of c: 1 to 64 lowercase
// letters, digits and single dashes. The name is also the position in the
// folder's manifest, which is a safe segment (CheckSegment) by this form.
func (c Collection) Check(name string) error {
	if !datasetRE.MatchString(name) || len(name) > 64 {
		return badName("invalid %s name %q: use lowercase letters, digits and dashes (e.g. lichess-train)", c.Noun, name)
	}
	return nil
}

// DatasetWriter writes the files of one new folder of a collection (a
// dataset, an index); Commit makes them visible.
type DatasetWriter struct {
	c       Collection
	s       *Store
	name    string
	id      Identity
	token   string
	started time.Time
	parts   []*PartWriter
	version string
}

// NewDatasetWriter starts dataset name (Datasets.NewWriter).
func NewDatasetWriter(ctx context.Context, s *Store, name string, config any, whaleVersion string) (*DatasetWriter, *Manifest, error) {
	return Datasets.NewWriter(ctx, s, name, config, whaleVersion)
}

// NewWriter starts folder name of c whose content is a function of config
// (the source file's digest, format, options). If a folder of that name is
// committed already, it returns its manifest: same config means there is
// nothing to do, another config is an ErrDatasetDiffers error.
func (c Collection) NewWriter(ctx context.Context, s *Store, name string, config any, whaleVersion string) (*DatasetWriter, *Manifest, error) {
	if err := c.Check(name); err != nil {
		return nil, nil, err
	}
	cfg, err := CanonicalJSON(config)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: encode config: %w", c.Noun, name, err)
	}
	id := Identity{Stage: c.Stage, Position: name, Config: cfg, ConfigDigest: DigestBytes(cfg), Shards: 1}
	if id.InputDigest, err = id.digest(); err != nil {
		return nil, nil, err
	}
	prev, err := c.Read(ctx, s, name)
	switch {
	case err == nil:
		if prev.InputDigest == id.InputDigest {
			return nil, prev, nil
		}
		return nil, prev, c.differs(name, prev.Identity, id)
	case !errors.Is(err, ErrNotFound):
		return nil, nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return &DatasetWriter{c: c, s: s, name: name, id: id, token: hex.EncodeToString(rnd[:]), started: now(), version: whaleVersion}, nil, nil
}

func (c Collection) differs(name string, was, now Identity) error {
	return fmt.Errorf("%w: %s %s was made from other data (%s); use another name, or delete %s first",
		ErrDatasetDiffers, c.Noun, name, strings.Join(now.Diff(was), "; "), c.Dir(name))
}

// Create starts a data file of table (e.g. "tasks") with extension ext.
func (w *DatasetWriter) Create(ctx context.Context, table, ext string) (*PartWriter, error) {
	if !tableRE.MatchString(table) || !extRE.MatchString(ext) {
		return nil, fmt.Errorf("%s %s: invalid table %q or extension %q", w.c.Noun, w.name, table, ext)
	}
	name := PartFileName(table, 0, 1, w.token, len(w.parts), ext)
	pw, err := w.s.NewPartWriter(ctx, w.c.Dir(w.name)+"/"+name)
	if err != nil {
		return nil, err
	}
	pw.table = table
	w.parts = append(w.parts, pw)
	return pw, nil
}

// Abort discards every file not yet uploaded.
func (w *DatasetWriter) Abort() {
	for _, p := range w.parts {
		p.Abort()
	}
}

// Commit uploads nothing more: every file must have been closed. It writes
// the manifest, which makes the folder visible. A concurrent writer of the
// same data that committed first is not an error.
func (w *DatasetWriter) Commit(ctx context.Context, summary map[string]any) (*Manifest, error) {
	// Built afresh on every call: a Commit retried after a failed one must
	// not list a file twice, which would commit a manifest no reader takes.
	files := make([]FileEntry, 0, len(w.parts))
	for _, p := range w.parts {
		if !p.closed || p.err != nil {
			return nil, fmt.Errorf("%s %s: file %s was not uploaded", w.c.Noun, w.name, p.key)
		}
		files = append(files, p.entry)
	}
	m := Manifest{Format: manifestFormat, Identity: w.id, Attempt: 1, Files: files,
		Parts: []PartInfo{{Shard: 0, Token: w.token, Files: len(files), Rows: sumRows(files), Summary: summary,
			Started: w.started, Finished: now(), Host: hostname(), WhaleVersion: w.version}},
		Summary: summary, Started: w.started, Finished: now(), WhaleVersion: w.version}
	data, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return nil, err
	}
	key := w.c.Dir(w.name) + "/" + ManifestName
	// Must-finish step: a Ctrl-C now must not leave the files without
	// their manifest for no reason.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := w.s.CreateExclusive(cctx, key, data); err != nil {
		if errors.Is(err, ErrExists) {
			prev, rerr := w.c.Read(cctx, w.s, w.name)
			if rerr == nil && prev.InputDigest == w.id.InputDigest {
				return prev, nil
			}
			if rerr == nil {
				return nil, w.c.differs(w.name, prev.Identity, w.id)
			}
		}
		return nil, fmt.Errorf("commit %s %s: %w", w.c.Noun, w.name, err)
	}
	return w.c.Read(cctx, w.s, w.name)
}

func sumRows(files []FileEntry) int64 {
	var n int64
	for _, f := range files {
		n += f.Rows
	}
	return n
}

// ReadDataset reads the manifest of a committed dataset (Datasets.Read).
func ReadDataset(ctx context.Context, s *Store, name string) (*Manifest, error) {
	return Datasets.Read(ctx, s, name)
}

// Read reads the manifest of committed folder name of c; ErrNotFound when
// there is none.
func (c Collection) Read(ctx context.Context, s *Store, name string) (*Manifest, error) {
	if err := c.Check(name); err != nil {
		return nil, err
	}
	dir := c.Dir(name)
	key := dir + "/" + ManifestName
	data, err := s.ReadAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", c.Noun, name, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", key, err)
	}
	if m.Stage != c.Stage || m.Position != name {
		return nil, fmt.Errorf("read manifest %s: it commits %s-%s, not %s %s: was it copied?", key, m.Position, m.Stage, c.Noun, name)
	}
	m.Dir, m.Key = dir, key
	return m, nil
}

// DatasetListing is one dataset folder as ListDatasets found it: its
// manifest, or the error that kept it from being read.
type DatasetListing struct {
	Name     string
	Manifest *Manifest
	Err      error
}

// ListDatasets returns the committed datasets, by name. A dataset whose
// manifest cannot be read (damaged, copied from elsewhere) is listed with its
// error rather than failing the whole listing; imports that never committed
// are left out. The error is for the listing itself.
func ListDatasets(ctx context.Context, s *Store) ([]DatasetListing, error) {
	var names []string
	err := s.List(ctx, DatasetsPrefix, true, func(e Entry) error {
		if e.IsDir {
			names = append(names, strings.TrimSuffix(strings.TrimPrefix(e.Key, DatasetsPrefix), "/"))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []DatasetListing
	for _, n := range names {
		if CheckDataset(n) != nil {
			continue
		}
		m, err := ReadDataset(ctx, s, n)
		if errors.Is(err, ErrNotFound) {
			continue // an import that never committed
		}
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		out = append(out, DatasetListing{Name: n, Manifest: m, Err: err})
	}
	return out, nil
}
