package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Format tags written into every protocol file; a reader refuses a major
// version it does not know instead of misreading it.
const (
	manifestFormat = "whale.manifest/v1"
	partFormat     = "whale.part/v1"
	inputsFormat   = "whale.inputs/v1"
)

// FileEntry is one data file of a stage, as its part manifest and the
// stage manifest record it.
type FileEntry struct {
	Name   string `json:"name"`   // relative to the stage folder
	Table  string `json:"table"`  // e.g. "rollouts"
	Shard  int    `json:"shard"`  // the shard that wrote it
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // "sha256:<hex>" of the bytes
	Rows   int64  `json:"rows"`   // as the writer reported
}

// PartManifest is the commit record of one shard, written with
// CreateExclusive at _parts/<shard>-of-<shards>.json.
type PartManifest struct {
	Format       string         `json:"format"`
	Run          string         `json:"run"`
	Position     string         `json:"position"`
	Stage        string         `json:"stage"`
	Attempt      int            `json:"attempt"`
	Shard        int            `json:"shard"`
	Shards       int            `json:"shards"`
	InputDigest  string         `json:"input_digest"`
	Token        string         `json:"token"`
	Files        []FileEntry    `json:"files"`
	Summary      map[string]any `json:"summary,omitempty"`
	Started      time.Time      `json:"started"`
	Finished     time.Time      `json:"finished"`
	Host         string         `json:"host,omitempty"`
	WhaleVersion string         `json:"whale_version,omitempty"`
}

// PartInfo is what the stage manifest keeps of each part manifest.
type PartInfo struct {
	Shard        int            `json:"shard"`
	Token        string         `json:"token"`
	Files        int            `json:"files"`
	Rows         int64          `json:"rows"`
	Summary      map[string]any `json:"summary,omitempty"`
	Started      time.Time      `json:"started"`
	Finished     time.Time      `json:"finished"`
	Host         string         `json:"host,omitempty"`
	WhaleVersion string         `json:"whale_version,omitempty"`
}

// Manifest is a committed stage: the contents of its _MANIFEST.json. Only
// files it names are part of the result.
type Manifest struct {
	Format string `json:"format"`
	Identity
	Attempt      int            `json:"attempt"`
	Files        []FileEntry    `json:"files"`
	Parts        []PartInfo     `json:"parts"`
	Summary      map[string]any `json:"summary,omitempty"` // the merged per-shard summaries
	Started      time.Time      `json:"started"`           // when the attempt began (its _INPUTS.json)
	Finished     time.Time      `json:"finished"`          // when it was committed
	WhaleVersion string         `json:"whale_version,omitempty"`

	// Set by the reader, not stored.
	Dir    string `json:"-"` // key of the stage folder
	Key    string `json:"-"` // key of this _MANIFEST.json
	Digest string `json:"-"` // sha256 of its bytes: what a consumer records as its input
}

// Folder is the stage folder the manifest commits.
func (m *Manifest) Folder() Folder {
	return Folder{Position: m.Position, Stage: m.Stage, Attempt: m.Attempt}
}

// AsInput is the reference a stage that reads m records.
func (m *Manifest) AsInput(name string) Input {
	return Input{Name: name, Key: m.Key, Digest: m.Digest}
}

// FileKey is the key of one of the manifest's files.
func (m *Manifest) FileKey(f FileEntry) string { return m.Dir + "/" + f.Name }

// Table returns the files of one table, in shard order.
func (m *Manifest) Table(table string) []FileEntry {
	var out []FileEntry
	for _, f := range m.Files {
		if f.Table == table {
			out = append(out, f)
		}
	}
	return out
}

// Rows is the total row count of a table.
func (m *Manifest) Rows(table string) int64 {
	var n int64
	for _, f := range m.Table(table) {
		n += f.Rows
	}
	return n
}

// OpenFile gives random access to a committed file. A size that differs
// from the manifest's means the file was replaced after commit; that is
// an error rather than a silently different result.
func (m *Manifest) OpenFile(ctx context.Context, s *Store, f FileEntry) (*ReaderAt, error) {
	r, err := s.OpenReaderAt(ctx, m.FileKey(f))
	if err != nil {
		return nil, fmt.Errorf("open %s of %s: %w", f.Name, m.Dir, err)
	}
	if r.Size() != f.Size {
		return nil, fmt.Errorf("open %s: size is %d bytes but %s records %d: the file changed after commit", m.FileKey(f), r.Size(), ManifestName, f.Size)
	}
	return r, nil
}

// NewFileReader streams a committed file.
func (m *Manifest) NewFileReader(ctx context.Context, s *Store, f FileEntry) (io.ReadCloser, error) {
	return s.NewReader(ctx, m.FileKey(f))
}

// DecodeManifest parses and checks a _MANIFEST.json.
func DecodeManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("format %q is not %q (written by a newer whale?)", m.Format, manifestFormat)
	}
	if m.Attempt < 1 {
		return nil, fmt.Errorf("attempt %d out of range", m.Attempt)
	}
	if err := m.Identity.check(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if f.Name == "" || strings.Contains(f.Name, "/") || seen[f.Name] {
			return nil, fmt.Errorf("bad or repeated file name %q", f.Name)
		}
		seen[f.Name] = true
	}
	m.Digest = DigestBytes(data)
	return &m, nil
}

// ReadManifest reads the manifest of the stage folder at dir (a key such as
// runs/x/stages/r003-w02-rollout). A folder that is not committed gives an
// error that errors.Is(err, ErrNotFound).
func ReadManifest(ctx context.Context, s *Store, dir string) (*Manifest, error) {
	dir = strings.TrimSuffix(dir, "/")
	key := dir + "/" + ManifestName
	data, err := s.ReadAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", key, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", key, err)
	}
	if got := m.Folder().String(); got != path.Base(dir) {
		return nil, fmt.Errorf("read manifest %s: it commits folder %s, not %s: was it copied?", key, got, path.Base(dir))
	}
	m.Dir, m.Key = dir, key
	return m, nil
}

// SummaryNumber reads a number from a stage summary as storage decodes it
// (float64) or as a stage built it (int, int64); anything else is 0.
func SummaryNumber(summary map[string]any, key string) float64 {
	switch v := summary[key].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	}
	return 0
}
