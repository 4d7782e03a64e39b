package searchqa

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/whalerun/whale/internal/buildinfo"
	"github.com/whalerun/whale/internal/retry"
	"github.com/whalerun/whale/storage"
)

// Indexes is where stored search indexes live. indexes/<name>/ is a folder
// committed by storage's protocol, as a dataset is: one tar+zstd archive of
// the index directory (table "index") and _MANIFEST.json, written last with
// a create-only write. The manifest's config is what the index is a function
// of (indexConfig: format, corpus digest, ...), so storing the same corpus
// again is a no-op and another corpus under a taken name is refused; its
// summary says what the archive unpacks to.
var Indexes = storage.Collection{Prefix: "indexes/", Stage: "index", Noun: "index"}

// archiveTable is the table of the one archive in a stored index.
const archiveTable = "index"

// legacyManifest committed indexes before they were stored like datasets.
const legacyManifest = "_INDEX.json"

// indexConfig is a stored index's identity: its manifest's config.
type indexConfig struct {
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	CorpusDigest  string `json:"corpus_digest"`
	Docs          int64  `json:"docs"`
	Analyzer      string `json:"analyzer"`
	Scoring       string `json:"scoring"`
}

// Summary keys of a stored index's manifest.
const (
	sumFiles   = "files"
	sumBytes   = "unpacked_bytes"
	sumCreated = "created"
)

// StoredIndex is a committed index as its manifest describes it.
type StoredIndex struct {
	Name string
	IndexInfo
	Archive       storage.FileEntry // the archive: name, size, sha256
	Files         int               // files it unpacks to
	UnpackedBytes int64
	Manifest      *storage.Manifest
}

// ErrNoIndex is matched, with storage.ErrNotFound, by the error
// ReadStoredIndex, DownloadIndex and OpenStored return when no index of
// that name is committed.
var ErrNoIndex = errors.New("no search index")

// ErrIndexDiffers is matched by the error UploadIndex returns when the name
// holds an index of another corpus.
var ErrIndexDiffers = errors.New("name holds an index of another corpus")

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ReadStoredIndex reads and checks the manifest of the index committed as
// name.
func ReadStoredIndex(ctx context.Context, store *storage.Store, name string) (*StoredIndex, error) {
	m, err := Indexes.Read(ctx, store, name)
	if errors.Is(err, storage.ErrNotFound) {
		if ok, _ := store.Exists(ctx, Indexes.Dir(name)+"/"+legacyManifest); ok {
			return nil, fmt.Errorf("index %s in %s was stored by an older whale; rebuild it with whale index build", name, store.URL())
		}
		return nil, fmt.Errorf("%w %s in %s (build one with whale index build): %w", ErrNoIndex, name, store.URL(), err)
	}
	if err != nil {
		return nil, err
	}
	return storedIndex(name, m)
}

func storedIndex(name string, m *storage.Manifest) (*StoredIndex, error) {
	var cfg indexConfig
	if err := json.Unmarshal(m.Config, &cfg); err != nil {
		return nil, fmt.Errorf("%s: config: %w", m.Key, err)
	}
	created, _ := time.Parse(time.RFC3339, fmt.Sprint(m.Summary[sumCreated]))
	si := &StoredIndex{Name: name, Manifest: m, Files: int(storage.SummaryNumber(m.Summary, sumFiles)),
		UnpackedBytes: int64(storage.SummaryNumber(m.Summary, sumBytes)),
		IndexInfo: IndexInfo{Format: cfg.Format, FormatVersion: cfg.FormatVersion, Docs: cfg.Docs, CorpusDigest: cfg.CorpusDigest,
			Analyzer: cfg.Analyzer, Scoring: cfg.Scoring, Created: created}}
	if err := checkInfo(si.IndexInfo); err != nil {
		return nil, fmt.Errorf("index %s (%s): %w", name, m.Key, err)
	}
	if !digestRE.MatchString(si.CorpusDigest) {
		return nil, fmt.Errorf("%s: corpus digest %q, want sha256:<64 hex digits>", m.Key, si.CorpusDigest)
	}
	if files := m.Table(archiveTable); len(files) != 1 || len(m.Files) != 1 {
		return nil, fmt.Errorf("%s: %d files, %d of table %s; want one archive", m.Key, len(m.Files), len(files), archiveTable)
	}
	si.Archive = m.Files[0]
	// The summary bounds what DownloadIndex unpacks.
	files, bytes := storage.SummaryNumber(m.Summary, sumFiles), storage.SummaryNumber(m.Summary, sumBytes)
	if files < 1 || files > maxFiles || files != math.Trunc(files) || bytes < 1 || bytes > maxUnpacked || bytes != math.Trunc(bytes) {
		return nil, fmt.Errorf("%s: summary says %v files, %v unpacked bytes; want whole numbers from 1 to %d and %d: rebuild the index with whale index build",
			m.Key, m.Summary[sumFiles], m.Summary[sumBytes], maxFiles, int64(maxUnpacked))
	}
	return si, nil
}

// Sanity bounds on a stored index's summary, far above any real index.
const (
	maxFiles    = 1 << 24
	maxUnpacked = 1 << 50
)

// UploadIndex packs the index directory dir (built by BuildIndex and not
// open for writing) and commits it as name. Uploading an index of the same
// corpus to a name that has one already is a no-op that returns the index
// there; an index of another corpus is an ErrIndexDiffers error.
func UploadIndex(ctx context.Context, store *storage.Store, name, dir string) (*StoredIndex, error) {
	info, err := ReadIndexInfo(dir)
	if err != nil {
		return nil, fmt.Errorf("upload index: %w", err)
	}
	cfg := configOf(info)
	w, prev, err := Indexes.NewWriter(ctx, store, name, cfg, buildinfo.Version())
	if err != nil {
		return nil, indexDiffers(ctx, store, name, prev, cfg, err)
	}
	if prev != nil {
		return storedIndex(name, prev)
	}
	committed := false
	defer func() {
		if !committed {
			w.Abort()
		}
	}()
	files, unpacked, err := uploadArchive(ctx, w, dir, info.Docs)
	if err != nil {
		return nil, fmt.Errorf("upload index %s: %w", dir, err)
	}
	m, err := w.Commit(ctx, map[string]any{sumFiles: files, sumBytes: unpacked, sumCreated: info.Created.Format(time.RFC3339)})
	if err != nil {
		return nil, indexDiffers(ctx, store, name, nil, cfg, err)
	}
	committed = true
	return storedIndex(name, m)
}

func configOf(info IndexInfo) indexConfig {
	return indexConfig{Format: info.Format, FormatVersion: info.FormatVersion, CorpusDigest: info.CorpusDigest,
		Docs: info.Docs, Analyzer: info.Analyzer, Scoring: info.Scoring}
}

// uploadArchive packs dir into the writer's one archive and uploads it.
func uploadArchive(ctx context.Context, w *storage.DatasetWriter, dir string, docs int64) (files int, unpacked int64, err error) {
	pw, err := w.Create(ctx, archiveTable, "tzst")
	if err != nil {
		return 0, 0, err
	}
	if files, unpacked, err = packDir(ctx, pw, dir); err != nil {
		return 0, 0, fmt.Errorf("pack: %w", err)
	}
	_, err = pw.Finish(docs)
	return files, unpacked, err
}

// indexDiffers says which corpus holds the name when err is storage's
// ErrDatasetDiffers, and returns err otherwise.
func indexDiffers(ctx context.Context, store *storage.Store, name string, prev *storage.Manifest, cfg indexConfig, err error) error {
	if !errors.Is(err, storage.ErrDatasetDiffers) {
		return fmt.Errorf("upload index: %w", err)
	}
	if prev == nil {
		if prev, _ = Indexes.Read(context.WithoutCancel(ctx), store, name); prev == nil {
			return fmt.Errorf("upload index: %w: %w", ErrIndexDiffers, err)
		}
	}
	var old indexConfig
	_ = json.Unmarshal(prev.Config, &old)
	if old.CorpusDigest == cfg.CorpusDigest {
		return fmt.Errorf("upload index: %w: %s %s holds an index of this corpus in format %s v%d, not %s v%d; choose another key, or delete it first",
			ErrIndexDiffers, store.URL(), Indexes.Dir(name), old.Format, old.FormatVersion, cfg.Format, cfg.FormatVersion)
	}
	return fmt.Errorf("upload index: %w: %s %s already holds an index of corpus %s (%d docs), not %s (%d docs); choose another key",
		ErrIndexDiffers, store.URL(), Indexes.Dir(name), old.CorpusDigest, old.Docs, cfg.CorpusDigest, cfg.Docs)
}

// packDir writes dir as a tar+zstd stream. Entries are sorted and carry no
// times or owners, so the same files always give the same archive.
func packDir(ctx context.Context, w io.Writer, dir string) (files int, bytes int64, err error) {
	var paths []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s is neither a file nor a directory", p)
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	slices.Sort(paths)
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return 0, 0, err
	}
	tw := tar.NewWriter(zw)
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return 0, 0, err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return 0, 0, err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Format: tar.FormatPAX, ModTime: time.Unix(0, 0)}
		if fi.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return 0, 0, err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return 0, 0, err
		}
		f, err := os.Open(p)
		if err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(tw, f)
		f.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", p, err)
		}
		if n != fi.Size() {
			return 0, 0, fmt.Errorf("%s changed size while packing; is the index open for writing?", p)
		}
		files++
		bytes += n
	}
	if err := tw.Close(); err != nil {
		return 0, 0, err
	}
	return files, bytes, zw.Close()
}

// DefaultCacheDir is where downloaded indexes are kept when no cache
// directory is given: whale/indexes under the user cache directory.
func DefaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "whale", "indexes")
}

// OpenStored opens the index committed as name, downloading it into
// cacheDir first unless the cache holds it already (DownloadIndex). An
// empty cacheDir means DefaultCacheDir. When no index of that name is
// committed the error matches ErrNoIndex and storage.ErrNotFound.
func OpenStored(ctx context.Context, store *storage.Store, name, cacheDir string) (*Index, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir()
	}
	dir, _, err := DownloadIndex(ctx, store, name, cacheDir)
	if err != nil {
		return nil, err
	}
	return OpenIndex(dir)
}

// DownloadIndex makes the index committed as name available in a local
// directory under cacheDir and returns that directory (open it with
// OpenIndex) and the index's manifest. The directory is named by the corpus
// digest and format version, so a later call, by this or another process,
// reuses it without a download.
//
// Nothing unverified is unpacked: the archive is first downloaded into a
// temporary file, no more than the size its manifest records, and its
// sha256 compared with the manifest's; only then is it extracted, into a
// temporary directory that is renamed into place, so the cache never holds
// half an index. Extraction writes at most the files and bytes the
// manifest's summary records, and stops at the first entry beyond them.
func DownloadIndex(ctx context.Context, store *storage.Store, name, cacheDir string) (string, *StoredIndex, error) {
	si, err := ReadStoredIndex(ctx, store, name)
	if err != nil {
		return "", nil, fmt.Errorf("download index: %w", err)
	}
	final := filepath.Join(cacheDir, fmt.Sprintf("%s-v%d-%s", IndexFormat, si.FormatVersion, strings.TrimPrefix(si.CorpusDigest, "sha256:")))
	if ok, err := cached(final, si); ok || err != nil {
		return final, si, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("download index: %w", err)
	}
	// The store retries opening the archive; a transfer that breaks off
	// mid-stream it returns to us, and only that is tried again.
	err = retry.Do(ctx, downloadRetry, func(ctx context.Context) error {
		err := fetchInto(ctx, store, si, cacheDir, final)
		if !storage.Transient(err) {
			return retry.Permanent(err)
		}
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("download index %s from %s: %w", name, store.URL(), err)
	}
	return final, si, nil
}

// downloadRetry restarts a download whose stream broke off.
var downloadRetry = retry.Policy{Attempts: 3, Base: time.Second, Max: 10 * time.Second}

// cached reports whether dir already holds the index si describes.
func cached(dir string, si *StoredIndex) (bool, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	info, err := ReadIndexInfo(dir)
	if err != nil {
		return false, fmt.Errorf("download index: cache entry %s is damaged (%v); remove it and retry", dir, err)
	}
	if info.CorpusDigest != si.CorpusDigest {
		return false, fmt.Errorf("download index: cache entry %s holds corpus %s, not %s; remove it and retry", dir, info.CorpusDigest, si.CorpusDigest)
	}
	return true, nil
}

// fetchInto downloads and checks si's archive, then unpacks it into final
// (see DownloadIndex).
func fetchInto(ctx context.Context, store *storage.Store, si *StoredIndex, cacheDir, final string) error {
	tmp, err := os.MkdirTemp(cacheDir, ".download-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	a := si.Archive
	archive := filepath.Join(tmp, "archive")
	if err := downloadArchive(ctx, store, si, archive); err != nil {
		return err
	}
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	dir := filepath.Join(tmp, "index")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	lim := unpackLimits{Files: si.Files, Bytes: si.UnpackedBytes}
	files, bytes, err := unpack(ctx, f, dir, lim)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", a.Name, err)
	}
	if files != lim.Files || bytes != lim.Bytes {
		return fmt.Errorf("archive %s unpacks to %d files, %d bytes; the manifest says %d files, %d bytes", a.Name, files, bytes, lim.Files, lim.Bytes)
	}
	info, err := ReadIndexInfo(dir)
	if err != nil {
		return err
	}
	if info.CorpusDigest != si.CorpusDigest {
		return fmt.Errorf("archive %s holds corpus %s; the manifest says %s", a.Name, info.CorpusDigest, si.CorpusDigest)
	}
	if err := os.Rename(dir, final); err != nil {
		// Another process may have put the same index there first.
		if ok, cerr := cached(final, si); ok {
			return nil
		} else if cerr != nil {
			return cerr
		}
		return err
	}
	return nil
}

// downloadArchive copies si's archive into the new file dst, reading no
// more than the size the manifest records, and checks its size and sha256
// against the manifest. A mismatch is an error and dst must not be used.
func downloadArchive(ctx context.Context, store *storage.Store, si *StoredIndex, dst string) error {
	a := si.Archive
	r, err := si.Manifest.NewFileReader(ctx, store, a)
	if err != nil {
		return retry.Permanent(err) // the store has retried it
	}
	defer r.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	// One byte more than the manifest's size tells a longer archive apart.
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, a.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download archive %s: %w", a.Name, err)
	}
	if n > a.Size {
		return fmt.Errorf("archive %s is larger than the %d bytes the manifest says; refused before unpacking", a.Name, a.Size)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != a.SHA256 || n != a.Size {
		return fmt.Errorf("archive %s is %d bytes with digest %s; the manifest says %d bytes, %s; refused before unpacking", a.Name, n, got, a.Size, a.SHA256)
	}
	return nil
}

// unpackLimits bound what unpack writes: the files and bytes a stored
// index's manifest says its archive holds.
type unpackLimits struct {
	Files int   // regular files; as many directories are allowed
	Bytes int64 // the files' total size
}

// maxWindow bounds the memory the zstd decoder takes for its window:
// packDir writes 8 MiB windows, and the decoder would otherwise allow a
// frame to ask for 512 MiB.
const maxWindow = 64 << 20

// maxDepth bounds how deep an archive entry lies: an index is bleve's
// files and one store/ directory.
const maxDepth = 8

// unpack extracts a tar+zstd stream into dir, accepting only plain files
// and directories that stay inside dir, and no more of them, nor more
// bytes, than lim allows: an entry that would go beyond a limit is refused
// before anything of it is written. It returns the files and bytes it
// wrote.
func unpack(ctx context.Context, r io.Reader, dir string, lim unpackLimits) (files int, bytes int64, err error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return 0, 0, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	dirs := 0
	for {
		if err := ctx.Err(); err != nil {
			return files, bytes, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, bytes, nil
		}
		if err != nil {
			return files, bytes, err
		}
		name := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
		if !fs.ValidPath(name) || name == "." {
			return files, bytes, fmt.Errorf("archive entry %q is not a relative path inside the index", hdr.Name)
		}
		if strings.Count(name, "/") >= maxDepth {
			// Each would make its parent directories, uncounted.
			return files, bytes, fmt.Errorf("archive entry %q is more than %d levels deep", hdr.Name, maxDepth)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if dirs++; dirs > lim.Files {
				return files, bytes, fmt.Errorf("archive entry %q: more directories than the %d files the manifest records", hdr.Name, lim.Files)
			}
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return files, bytes, err
			}
		case tar.TypeReg:
			if files >= lim.Files {
				return files, bytes, fmt.Errorf("archive entry %q: more than the %d files the manifest records", hdr.Name, lim.Files)
			}
			if hdr.Size < 0 || hdr.Size > lim.Bytes-bytes {
				return files, bytes, fmt.Errorf("archive entry %q is %d bytes, which with the %d unpacked before it exceeds the %d bytes the manifest records",
					hdr.Name, hdr.Size, bytes, lim.Bytes)
			}
			n, err := writeEntry(dst, io.LimitReader(tr, hdr.Size))
			files++
			bytes += n
			if err != nil {
				return files, bytes, fmt.Errorf("%s: %w", hdr.Name, err)
			}
			if n != hdr.Size {
				return files, bytes, fmt.Errorf("%s: %d bytes, header says %d", hdr.Name, n, hdr.Size)
			}
		default:
			return files, bytes, fmt.Errorf("archive entry %q has type %q; only files and directories are allowed", hdr.Name, hdr.Typeflag)
		}
	}
}

// writeEntry creates the file dst, which must not exist, with r's bytes.
func writeEntry(dst string, r io.Reader) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
