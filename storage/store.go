package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Store is a bucket opened by URL, with a key prefix. It is safe for
// concurrent use.
type Store struct {
	bucket   *blob.Bucket
	url      string // redacted, for messages
	scheme   string
	dir      string // file:// only: the directory that holds the keys
	retry    RetryPolicy
	tempDir  string
	pageSize int
	n        counters
}

// URL returns the redacted root URL.
func (s *Store) URL() string { return s.url }

// Scheme returns the URL scheme of the root (file, mem, s3, ...).
func (s *Store) Scheme() string { return s.scheme }

// Close releases the bucket.
func (s *Store) Close() error { return s.bucket.Close() }

// Join builds a key from parts, as path.Join does.
func Join(parts ...string) string { return path.Join(parts...) }

func (s *Store) fail(op, key string, err error) error {
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	return &Error{Op: op, URL: s.url, Key: key, Kind: kindOf(err), Err: err}
}

// checkKey rejects keys that would mean different things on different
// backends: absolute or relative paths, empty segments, and the names that
// file:// roots use for their own temporary files (fileblob's "<key>.<hex
// nanos>.tmp" and ".attrs" side files, and our .whale-tmp folder), which
// would be hidden or refused there but not on object stores.
func checkKey(key string) error {
	why := ""
	switch {
	case key == "":
		why = "empty"
	case strings.HasPrefix(key, "/"):
		why = "starts with /"
	case strings.HasSuffix(key, "/"):
		why = "ends with /"
	case !utf8.ValidString(key):
		why = "not valid UTF-8"
	case strings.HasSuffix(key, ".attrs"), fileTempName.MatchString(key):
		why = "the name is reserved for the temporary and side files of file:// roots"
	default:
		for p := range strings.SplitSeq(key, "/") {
			if p == "" {
				why = "has an empty segment (//)"
			} else if p == "." || p == ".." {
				why = "has a . or .. segment"
			} else if p == localTmp {
				why = localTmp + " is reserved"
			}
			if why != "" {
				break
			}
		}
	}
	if why != "" {
		return fmt.Errorf("%w %q: %s; keys are relative slash-separated paths such as runs/r1/run.json", ErrInvalidKey, key, why)
	}
	return nil
}

// Attrs are what callers may rely on about an object.
type Attrs struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Stat returns an object's attributes; ErrNotFound when it is absent.
func (s *Store) Stat(ctx context.Context, key string) (Attrs, error) {
	if err := checkKey(key); err != nil {
		return Attrs{}, s.fail("stat", key, err)
	}
	var a *blob.Attributes
	err := s.retry.do(ctx, "stat", func() (e error) {
		s.n.stats.Add(1)
		actx, cancel := s.retry.attemptContext(ctx)
		defer cancel()
		a, e = s.bucket.Attributes(actx, key)
		return e
	})
	if err != nil {
		return Attrs{}, s.fail("stat", key, err)
	}
	return Attrs{Key: key, Size: a.Size, ModTime: a.ModTime}, nil
}

// Exists reports whether key exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.Stat(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// NewReader streams an object. Opening is retried; a failure mid-stream is
// returned to the caller, who may reopen.
func (s *Store) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.NewRangeReader(ctx, key, 0, -1)
}

// NewRangeReader streams length bytes from offset (length < 0: to the end).
func (s *Store) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, s.fail("read", key, err)
	}
	var r *blob.Reader
	err := s.retry.do(ctx, "read", func() (e error) {
		s.n.reads.Add(1)
		r, e = s.bucket.NewRangeReader(ctx, key, offset, length, nil)
		return e
	})
	if err != nil {
		return nil, s.fail("read", key, err)
	}
	return &reader{r: r, s: s, key: key}, nil
}

type reader struct {
	r   *blob.Reader
	s   *Store
	key string
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.fail("read", r.key, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.r.Close() }

// ReadAll reads a small object whole, retrying the whole read.
func (s *Store) ReadAll(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, s.fail("read", key, err)
	}
	var data []byte
	err := s.retry.do(ctx, "read", func() (e error) {
		s.n.reads.Add(1)
		data, e = s.bucket.ReadAll(ctx, key)
		return e
	})
	if err != nil {
		return nil, s.fail("read", key, err)
	}
	return data, nil
}

// NewWriter streams a new object to key. The object becomes visible only
// when Close returns nil; Abort (or a cancelled ctx) discards it. A
// streaming write is not retried: callers who need retries use Put with a
// seekable source.
func (s *Store) NewWriter(ctx context.Context, key string) (*Writer, error) {
	if err := checkKey(key); err != nil {
		return nil, s.fail("write", key, err)
	}
	s.n.writes.Add(1)
	wctx, cancel := context.WithCancel(ctx)
	w, err := s.bucket.NewWriter(wctx, key, writerOptions(key))
	if err != nil {
		cancel()
		return nil, s.fail("write", key, err)
	}
	return &Writer{w: w, cancel: cancel, s: s, key: key}, nil
}

// Writer is a streaming object writer.
type Writer struct {
	w      *blob.Writer
	cancel context.CancelFunc
	s      *Store
	key    string
	done   bool
}

func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		err = w.s.fail("write", w.key, err)
	}
	return n, err
}

// Close commits the object.
func (w *Writer) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	defer w.cancel()
	if err := w.w.Close(); err != nil {
		return w.s.fail("write", w.key, err)
	}
	return nil
}

// Abort discards the object; nothing becomes visible.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.cancel()
	_ = w.w.Close()
}

// contentTypes are the types of the artifacts whale writes. A fixed table,
// not the system's mime.types, so that every machine labels an object the
// same way; gocloud would otherwise sniff the first bytes.
var contentTypes = map[string]string{
	".json":    "application/json",
	".jsonl":   "application/x-ndjson",
	".parquet": "application/vnd.apache.parquet",
	".star":    "text/plain; charset=utf-8",
	".txt":     "text/plain; charset=utf-8",
	".md":      "text/markdown; charset=utf-8",
	".html":    "text/html; charset=utf-8",
	".csv":     "text/csv; charset=utf-8",
	".yaml":    "application/yaml",
	".yml":     "application/yaml",
}

func contentType(key string) string {
	if t, ok := contentTypes[strings.ToLower(path.Ext(key))]; ok {
		return t
	}
	return "application/octet-stream"
}

func writerOptions(key string) *blob.WriterOptions {
	return &blob.WriterOptions{ContentType: contentType(key)}
}

// Put writes the object from a seekable source, retrying transient
// failures from the start of src.
func (s *Store) Put(ctx context.Context, key string, src io.ReadSeeker) error {
	if err := checkKey(key); err != nil {
		return s.fail("write", key, err)
	}
	err := s.retry.do(ctx, "write", func() error {
		if _, err := src.Seek(0, io.SeekStart); err != nil {
			return err
		}
		s.n.writes.Add(1)
		return s.bucket.Upload(ctx, key, src, writerOptions(key))
	})
	if err != nil {
		return s.fail("write", key, err)
	}
	return nil
}

// WriteAll writes a small object whole (overwriting is allowed: use
// CreateExclusive where it is not).
func (s *Store) WriteAll(ctx context.Context, key string, data []byte) error {
	return s.Put(ctx, key, bytes.NewReader(data))
}

// Delete removes key; deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return s.fail("delete", key, err)
	}
	err := s.retry.do(ctx, "delete", func() error {
		s.n.deletes.Add(1)
		actx, cancel := s.retry.attemptContext(ctx)
		defer cancel()
		return s.bucket.Delete(actx, key)
	})
	if err != nil && !errors.Is(kindOf(err), ErrNotFound) {
		return s.fail("delete", key, err)
	}
	return nil
}

// Entry is one listed object or, with a delimiter, a common prefix ("dir").
type Entry struct {
	Key     string
	Size    int64
	ModTime time.Time
	IsDir   bool
}

// List calls fn for every key under prefix in lexical order. With dirs set,
// keys are grouped at the next "/" and fn sees each group once as an
// IsDir entry whose Key ends in "/". fn runs in the caller's goroutine; an
// error from fn stops the listing and is returned as is. A listing is not
// a snapshot: keys written or deleted meanwhile may or may not be seen.
// Object stores are listed a page at a time; a file:// root is read whole
// (and sorted) before fn sees the first entry.
func (s *Store) List(ctx context.Context, prefix string, dirs bool, fn func(Entry) error) error {
	if strings.HasPrefix(prefix, "/") || slices.Contains(strings.Split(prefix, "/"), "..") {
		return s.fail("list", prefix, fmt.Errorf("%w %q: a list prefix is relative and has no .. segment", ErrInvalidKey, prefix))
	}
	opts := &blob.ListOptions{Prefix: prefix}
	if dirs {
		opts.Delimiter = "/"
	}
	if s.dir != "" {
		return s.listLocal(ctx, prefix, opts, fn)
	}
	var token = blob.FirstPageToken
	for {
		var page []*blob.ListObject
		var next []byte
		err := s.retry.do(ctx, "list", func() (e error) {
			s.n.lists.Add(1)
			actx, cancel := s.retry.attemptContext(ctx)
			defer cancel()
			page, next, e = s.bucket.ListPage(actx, token, s.pageSize, opts)
			return e
		})
		if err != nil {
			return s.fail("list", prefix, err)
		}
		for _, o := range page {
			if err := fn(Entry{Key: o.Key, Size: o.Size, ModTime: o.ModTime, IsDir: o.IsDir}); err != nil {
				return err
			}
		}
		if len(next) == 0 {
			return nil
		}
		token = next
	}
}

// listLocal lists a file:// root in one page, then sorts it. fileblob
// walks directories in file-name order, which is not key order ("a/1"
// comes before "a-b" although '-' < '/'), and its page token skips every
// key that sorts before the last one returned: paging through it loses
// keys. So the page grows until the whole listing fits in one.
//
// fileblob also fails a whole listing with NotFound when a file vanishes
// between reading its directory and stat-ing it — which is what a
// concurrent writer's temporary file does when it is renamed into place.
// A missing prefix lists as empty, so NotFound here only ever means that
// race, and the listing is simply walked again.
func (s *Store) listLocal(ctx context.Context, prefix string, opts *blob.ListOptions, fn func(Entry) error) error {
	var page []*blob.ListObject
	for size := s.pageSize; ; size *= 8 {
		var next []byte
		err := s.retry.do(ctx, "list", func() (e error) {
			for range localListTries {
				s.n.lists.Add(1)
				page, next, e = s.bucket.ListPage(ctx, blob.FirstPageToken, size, opts)
				if gcerrors.Code(e) != gcerrors.NotFound {
					return e
				}
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			return e
		})
		if err != nil {
			return s.fail("list", prefix, err)
		}
		if len(next) == 0 {
			break
		}
	}
	slices.SortFunc(page, func(a, b *blob.ListObject) int { return strings.Compare(a.Key, b.Key) })
	for i, o := range page {
		if isLocalTemp(o.Key) || (i > 0 && page[i-1].Key == o.Key) {
			continue
		}
		if err := fn(Entry{Key: o.Key, Size: o.Size, ModTime: o.ModTime, IsDir: o.IsDir}); err != nil {
			return err
		}
	}
	return nil
}

// localListTries bounds the walks of one local listing that lose the race
// with a renamed temporary file. With writers busy in a large folder most
// walks can lose it (at 20 tries, TestFileListWhileWriting failed about
// once in 60 runs on a loaded 2-core machine); each try is one walk, and
// only a race costs one.
const localListTries = 200

// fileTempName matches the names fileblob gives files it is still writing
// (key.<hex nanos>.tmp); they are not objects yet.
var fileTempName = regexp.MustCompile(`\.[0-9a-f]{12,16}\.tmp$`)

// isLocalTemp reports whether a key listed from a file:// root is one of
// the temporary files of fileblob or of createLocal, at any depth: a root
// opened at a parent folder sees the .whale-tmp folder of a prefixed one.
func isLocalTemp(key string) bool {
	k := strings.TrimSuffix(key, "/")
	return fileTempName.MatchString(k) || k == localTmp || strings.HasPrefix(k, localTmp+"/") ||
		strings.Contains(k, "/"+localTmp+"/") || strings.HasSuffix(k, "/"+localTmp)
}
