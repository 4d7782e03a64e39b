package finetune

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// Tables the stage writes.
const (
	TableIndex = "checkpoint"       // one JSON Index
	TableFiles = "checkpoint_files" // the checkpoint's files, one object each
)

// IndexFormat is the format tag of an Index.
const IndexFormat = "whale.checkpoint/1"

// Index is the content of a finetune stage's checkpoint table: which model
// version the stage produced and where its files are.
type Index struct {
	Format  string `json:"format"`
	ModelID string `json:"model_id"`
	// Trained is false when the update was skipped and the base carried
	// forward.
	Trained bool `json:"trained"`
	LoRA    bool `json:"lora"`
	// BaseModel is the run's initial checkpoint string.
	BaseModel string `json:"base_model"`
	// Checkpoint is set instead of Files when the model is not in the
	// bucket: the initial checkpoint string, carried forward by a skipped
	// update.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Base says what this version was trained from.
	Base  BaseRef     `json:"base"`
	Files []IndexFile `json:"files"`
}

// BaseRef names the base of a checkpoint.
type BaseRef struct {
	ModelID    string `json:"model_id"`
	Checkpoint string `json:"checkpoint,omitempty"` // a string base
	Stage      string `json:"stage,omitempty"`      // key of the base stage's manifest
}

// IndexFile is one file of a checkpoint.
type IndexFile struct {
	Path   string `json:"path"` // relative to the checkpoint directory, slash-separated
	Key    string `json:"key"`  // object key under the root
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func (idx Index) bytes() int64 {
	var n int64
	for _, f := range idx.Files {
		n += f.Size
	}
	return n
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// DecodeIndex parses and checks an Index.
func DecodeIndex(data []byte) (*Index, error) {
	var idx Index
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("checkpoint index: %w", err)
	}
	if idx.Format != IndexFormat {
		return nil, fmt.Errorf("checkpoint index: format %q is not %q (written by a newer whale?)", idx.Format, IndexFormat)
	}
	if idx.ModelID == "" {
		return nil, errors.New("checkpoint index: model_id is empty")
	}
	if len(idx.Files) == 0 && idx.Checkpoint == "" {
		return nil, errors.New("checkpoint index: neither files nor a checkpoint string")
	}
	seen := map[string]bool{}
	for i, f := range idx.Files {
		if !localPath(f.Path) {
			return nil, fmt.Errorf("checkpoint index: file %d: path %q is not a relative path inside the checkpoint", i, f.Path)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("checkpoint index: file %d: path %q repeated", i, f.Path)
		}
		seen[f.Path] = true
		if f.Key == "" || strings.HasPrefix(f.Key, "/") || strings.HasSuffix(f.Key, "/") || !localPath(f.Key) {
			return nil, fmt.Errorf("checkpoint index: file %q: bad key %q", f.Path, f.Key)
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("checkpoint index: file %q: negative size", f.Path)
		}
		if !digestRE.MatchString(f.SHA256) {
			return nil, fmt.Errorf("checkpoint index: file %q: bad sha256 %q", f.Path, f.SHA256)
		}
	}
	return &idx, nil
}

// localPath: a clean, slash-separated relative path without . or ..
// segments, fit both as a key suffix and as a path under a directory.
func localPath(p string) bool {
	if p == "" || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return false
	}
	if path.Clean(p) != p || !filepath.IsLocal(filepath.FromSlash(p)) {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." || seg == "" {
			return false
		}
	}
	return true
}

// ReadIndex reads the checkpoint index of a committed finetune manifest.
func ReadIndex(ctx context.Context, x *stages.Exec, m *storage.Manifest) (*Index, error) {
	files := m.Table(TableIndex)
	if len(files) != 1 {
		return nil, fmt.Errorf("finetune: %s: want one %q file, found %d (is it a finetune stage?)", m.Dir, TableIndex, len(files))
	}
	r, err := x.NewReader(ctx, m, files[0])
	if err != nil {
		return nil, fmt.Errorf("finetune: read checkpoint index %s: %w", m.FileKey(files[0]), err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("finetune: read checkpoint index %s: %w", m.FileKey(files[0]), err)
	}
	idx, err := DecodeIndex(data)
	if err != nil {
		return nil, fmt.Errorf("finetune: %s: %w", m.FileKey(files[0]), err)
	}
	return idx, nil
}

// baseModel is the checkpoint a training run starts from.
type baseModel struct {
	ModelID    string
	Checkpoint string      // a string base (no files)
	Files      []IndexFile // a base in the bucket
	Stage      string      // the base stage's manifest key
	index      *Index
	cfg        Config
}

func (st *Stage) resolveBase(ctx context.Context, x *stages.Exec, cfg Config) (baseModel, error) {
	m := x.Inputs["base"]
	if m == nil {
		id := cfg.ModelName
		if id == "" {
			id = cfg.BaseCheckpoint
		}
		return baseModel{ModelID: id, Checkpoint: cfg.BaseCheckpoint, cfg: cfg}, nil
	}
	idx, err := ReadIndex(ctx, x, m)
	if err != nil {
		return baseModel{}, err
	}
	return baseModel{ModelID: idx.ModelID, Checkpoint: idx.Checkpoint, Files: idx.Files, Stage: m.Key, index: idx, cfg: cfg}, nil
}

func (b baseModel) ref() BaseRef {
	r := BaseRef{ModelID: b.ModelID, Stage: b.Stage}
	if len(b.Files) == 0 {
		r.Checkpoint = b.Checkpoint
	}
	return r
}

// carried is the index of a skipped update: the base, unchanged, whose
// entries keep pointing at the files of the stage that wrote them.
func (b baseModel) carried() Index {
	idx := Index{Format: IndexFormat, ModelID: b.ModelID, BaseModel: b.cfg.BaseCheckpoint, Base: b.ref(), Checkpoint: b.Checkpoint, Files: b.Files}
	if b.index != nil {
		idx.LoRA = b.index.LoRA
		idx.BaseModel = b.index.BaseModel
	}
	if idx.Files == nil {
		idx.Files = []IndexFile{}
	}
	return idx
}

func writeIndex(ctx context.Context, x *stages.Exec, idx Index) error {
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("finetune: encode checkpoint index: %w", err)
	}
	w, err := x.Create(ctx, TableIndex+".json")
	if err != nil {
		return err
	}
	if _, err := w.Write(append(data, '\n')); err != nil {
		w.Abort()
		return fmt.Errorf("finetune: write checkpoint index %s: %w", w.Key(), err)
	}
	w.SetRows(int64(len(idx.Files)))
	if err := w.Close(); err != nil {
		return fmt.Errorf("finetune: upload checkpoint index: %w", err)
	}
	return nil
}

// listOutput lists the regular files under dir (following symlinks to
// files), as sorted slash-separated relative paths.
func listOutput(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file (a symlink to a directory?)", rel)
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finetune: list trainer output %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}

var extRE = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// objectExt keeps a file's extension in its object name when the store
// accepts it, so that a listing of the bucket stays readable.
func objectExt(rel string) string {
	ext := strings.TrimPrefix(strings.ToLower(path.Ext(rel)), ".")
	if extRE.MatchString(ext) {
		return ext
	}
	return "bin"
}

// uploadParallel bounds concurrent uploads: each spools to local disk
// first, so more would only add disk pressure.
const uploadParallel = 4

func uploadCheckpoint(ctx context.Context, x *stages.Exec, dir string, files []string) ([]IndexFile, error) {
	out := make([]IndexFile, len(files))
	errs := make([]error, len(files))
	sem := make(chan struct{}, uploadParallel)
	var wg sync.WaitGroup
	for i, rel := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = uploadFile(ctx, x, dir, rel)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func uploadFile(ctx context.Context, x *stages.Exec, dir, rel string) (IndexFile, error) {
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return IndexFile{}, fmt.Errorf("finetune: upload checkpoint: %w", err)
	}
	defer f.Close()
	w, err := x.Create(ctx, TableFiles+"."+objectExt(rel))
	if err != nil {
		return IndexFile{}, err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), f); err != nil {
		w.Abort()
		return IndexFile{}, fmt.Errorf("finetune: upload checkpoint file %s to %s: %w", rel, w.Key(), err)
	}
	if err := w.Close(); err != nil {
		return IndexFile{}, fmt.Errorf("finetune: upload checkpoint file %s: %w", rel, err)
	}
	return IndexFile{Path: rel, Key: w.Key(), Size: w.Size(), SHA256: "sha256:" + hex.EncodeToString(h.Sum(nil))}, nil
}

// downloadCheckpoint writes the files of a checkpoint in the bucket under
// dir, checking each one's size and sha256.
func downloadCheckpoint(ctx context.Context, x *stages.Exec, files []IndexFile, dir string) error {
	for _, f := range files {
		if err := downloadFile(ctx, x, f, dir); err != nil {
			return err
		}
	}
	return nil
}

func downloadFile(ctx context.Context, x *stages.Exec, f IndexFile, dir string) error {
	dst := filepath.Join(dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("finetune: download base checkpoint: %w", err)
	}
	// The entry's key is under a committed stage folder (see carried): a
	// manifest stub for that folder lets the Exec read it.
	stub := &storage.Manifest{Dir: path.Dir(f.Key)}
	r, err := x.NewReader(ctx, stub, storage.FileEntry{Name: path.Base(f.Key), Size: f.Size})
	if err != nil {
		return fmt.Errorf("finetune: download base checkpoint file %s: %w", f.Path, err)
	}
	defer r.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("finetune: download base checkpoint: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("finetune: download base checkpoint file %s (%s): %w", f.Path, f.Key, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); n != f.Size || got != f.SHA256 {
		return fmt.Errorf("finetune: base checkpoint file %s (%s): got %d bytes %s, the index says %d bytes %s", f.Path, f.Key, n, got, f.Size, f.SHA256)
	}
	return nil
}

// ModelIDFile is the file a trainer may write to its output directory to
// name the new model version itself (one line).
const ModelIDFile = "whale_model_id"

func readModelID(dir string) (string, bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, ModelIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("finetune: %w", err)
	}
	id, err := parseModelID(data)
	if err != nil {
		return "", false, fmt.Errorf("finetune: $WHALE_OUTPUT_DIR/%s: %w", ModelIDFile, err)
	}
	return id, true, nil
}

func parseModelID(data []byte) (string, error) {
	id := strings.TrimSpace(string(data))
	switch {
	case id == "":
		return "", errors.New("empty model id")
	case len(id) > 256:
		return "", fmt.Errorf("model id of %d bytes: want at most 256", len(id))
	case strings.ContainsAny(id, "\r\n\t\x00"):
		return "", errors.New("model id must be one line without tabs")
	}
	return id, nil
}
