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
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/whalerun/whale/internal/retry"
	"github.com/whalerun/whale/storage"
)

// An index in a bucket is a folder under key holding one tar+zstd archive
// of the index directory, named by its digest, and _INDEX.json, written
// last with a create-only write: the folder counts only once that manifest
// exists, and two uploaders never overwrite each other's archive.
const indexManifestName = "_INDEX.json"

// IndexManifest is the commit record of an uploaded index.
type IndexManifest struct {
	IndexInfo
	Archive       string `json:"archive"` // object name within the index folder
	ArchiveSize   int64  `json:"archive_size"`
	ArchiveDigest string `json:"archive_digest"` // "sha256:<hex>" of the archive bytes
	Files         int    `json:"files"`
	UnpackedBytes int64  `json:"unpacked_bytes"`
}

// ReadIndexManifest reads the manifest of the index uploaded under key.
// When there is none the error wraps storage.ErrNotFound.
func ReadIndexManifest(ctx context.Context, store *storage.Store, key string) (*IndexManifest, error) {
	mkey := storage.Join(key, indexManifestName)
	b, err := store.ReadAll(ctx, mkey)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("no search index at %s key %s (build one with whale index build): %w", store.URL(), key, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read index manifest: %w", err)
	}
	var m IndexManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read index manifest %s: %w", mkey, err)
	}
	if err := checkInfo(m.IndexInfo); err != nil {
		return nil, fmt.Errorf("index manifest %s: %w", mkey, err)
	}
	if m.Archive == "" || strings.Contains(m.Archive, "/") || m.ArchiveDigest == "" {
		return nil, fmt.Errorf("index manifest %s: archive name %q or digest %q is not valid", mkey, m.Archive, m.ArchiveDigest)
	}
	return &m, nil
}

// UploadIndex packs the index directory dir (built by BuildIndex and not
// open for writing) and stores it under key. Uploading an index of the same
// corpus to a key that already has one is a no-op that returns the
// manifest already there; an index of another corpus is an error.
func UploadIndex(ctx context.Context, store *storage.Store, key, dir string) (*IndexManifest, error) {
	info, err := ReadIndexInfo(dir)
	if err != nil {
		return nil, fmt.Errorf("upload index: %w", err)
	}
	if old, err := ReadIndexManifest(ctx, store, key); err == nil {
		return sameIndex(store, key, old, info)
	} else if !errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("upload index: %w", err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(filepath.Clean(dir)), "."+filepath.Base(dir)+".upload-*.tar.zst")
	if err != nil {
		return nil, fmt.Errorf("upload index %s: %w", dir, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	m := &IndexManifest{IndexInfo: info}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(tmp, h)}
	if m.Files, m.UnpackedBytes, err = packDir(ctx, cw, dir); err != nil {
		return nil, fmt.Errorf("upload index %s: pack: %w", dir, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	m.ArchiveDigest = "sha256:" + sum
	m.ArchiveSize = cw.n
	m.Archive = "index-" + sum[:16] + ".tar.zst"
	akey := storage.Join(key, m.Archive)
	if err := store.Put(ctx, akey, tmp); err != nil {
		return nil, fmt.Errorf("upload index %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	err = store.CreateExclusive(ctx, storage.Join(key, indexManifestName), append(b, '\n'))
	if errors.Is(err, storage.ErrExists) {
		// Another uploader committed first; keep theirs and drop our
		// archive unless it is the very one their manifest names.
		old, rerr := ReadIndexManifest(ctx, store, key)
		if rerr != nil {
			return nil, fmt.Errorf("upload index %s: %w", dir, rerr)
		}
		if old.Archive != m.Archive {
			_ = store.Delete(ctx, akey)
		}
		return sameIndex(store, key, old, info)
	}
	if err != nil {
		return nil, fmt.Errorf("upload index %s: commit: %w", dir, err)
	}
	return m, nil
}

// ErrIndexDiffers is matched by the error UploadIndex returns when the key
// holds an index of another corpus.
var ErrIndexDiffers = errors.New("key holds an index of another corpus")

func sameIndex(store *storage.Store, key string, old *IndexManifest, info IndexInfo) (*IndexManifest, error) {
	if old.CorpusDigest == info.CorpusDigest {
		return old, nil
	}
	return nil, fmt.Errorf("upload index: %w: %s key %s already holds an index of corpus %s (%d docs), not %s (%d docs); choose another key",
		ErrIndexDiffers, store.URL(), key, old.CorpusDigest, old.Docs, info.CorpusDigest, info.Docs)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
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

// DownloadIndex makes the index uploaded under key available in a local
// directory under cacheDir and returns that directory (open it with
// OpenIndex) and the manifest. The directory is named by the corpus digest
// and format version, so a later call, by this or another process, reuses
// it without a download. The archive is checked against the manifest's
// digest and extracted into a temporary directory that is renamed into
// place, so the cache never holds half an index.
func DownloadIndex(ctx context.Context, store *storage.Store, key, cacheDir string) (string, *IndexManifest, error) {
	m, err := ReadIndexManifest(ctx, store, key)
	if err != nil {
		return "", nil, fmt.Errorf("download index: %w", err)
	}
	hexDigest := strings.TrimPrefix(m.CorpusDigest, "sha256:")
	if hexDigest == m.CorpusDigest || len(hexDigest) != 64 {
		return "", nil, fmt.Errorf("download index: manifest under %s has corpus digest %q, want sha256:<64 hex digits>", key, m.CorpusDigest)
	}
	final := filepath.Join(cacheDir, fmt.Sprintf("%s-v%d-%s", IndexFormat, m.FormatVersion, hexDigest))
	if ok, err := cached(final, m); ok || err != nil {
		return final, m, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("download index: %w", err)
	}
	// The store retries opening the archive; a transfer that breaks off
	// mid-stream it returns to us, and only that is tried again.
	err = retry.Do(ctx, downloadRetry, func(ctx context.Context) error {
		err := fetchInto(ctx, store, key, m, cacheDir, final)
		if !storage.Transient(err) {
			return retry.Permanent(err)
		}
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("download index %s key %s: %w", store.URL(), key, err)
	}
	return final, m, nil
}

// downloadRetry restarts a download whose stream broke off.
var downloadRetry = retry.Policy{Attempts: 3, Base: time.Second, Max: 10 * time.Second}

// cached reports whether dir already holds the index m describes.
func cached(dir string, m *IndexManifest) (bool, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	info, err := ReadIndexInfo(dir)
	if err != nil {
		return false, fmt.Errorf("download index: cache entry %s is damaged (%v); remove it and retry", dir, err)
	}
	if info.CorpusDigest != m.CorpusDigest {
		return false, fmt.Errorf("download index: cache entry %s holds corpus %s, not %s; remove it and retry", dir, info.CorpusDigest, m.CorpusDigest)
	}
	return true, nil
}

func fetchInto(ctx context.Context, store *storage.Store, key string, m *IndexManifest, cacheDir, final string) error {
	tmp, err := os.MkdirTemp(cacheDir, ".download-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r, err := store.NewReader(ctx, storage.Join(key, m.Archive))
	if err != nil {
		return retry.Permanent(err) // the store has retried it
	}
	defer r.Close()
	h := sha256.New()
	cr := &countReader{r: io.TeeReader(r, h)}
	if err := unpack(ctx, cr, tmp); err != nil {
		return fmt.Errorf("unpack %s: %w", m.Archive, err)
	}
	// Read any padding after the tar trailer so the digest covers it all.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != m.ArchiveDigest || cr.n != m.ArchiveSize {
		return fmt.Errorf("archive %s is %d bytes with digest %s; the manifest says %d bytes, %s", m.Archive, cr.n, got, m.ArchiveSize, m.ArchiveDigest)
	}
	info, err := ReadIndexInfo(tmp)
	if err != nil {
		return err
	}
	if info.CorpusDigest != m.CorpusDigest {
		return fmt.Errorf("archive %s holds corpus %s; the manifest says %s", m.Archive, info.CorpusDigest, m.CorpusDigest)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process may have put the same index there first.
		if ok, cerr := cached(final, m); ok {
			return nil
		} else if cerr != nil {
			return cerr
		}
		return err
	}
	return nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// unpack extracts a tar+zstd stream into dir, accepting only plain files
// and directories that stay inside dir.
func unpack(ctx context.Context, r io.Reader, dir string) error {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
		if !fs.ValidPath(name) || name == "." {
			return fmt.Errorf("archive entry %q is not a relative path inside the index", hdr.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			n, err := io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			if n != hdr.Size {
				return fmt.Errorf("%s: %d bytes, header says %d", hdr.Name, n, hdr.Size)
			}
		default:
			return fmt.Errorf("archive entry %q has type %q; only files and directories are allowed", hdr.Name, hdr.Typeflag)
		}
	}
}
