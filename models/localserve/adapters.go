package localserve

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/whalerun/whale/models/local"
)

// LoadPath loads a checkpoint from a file, or from a directory holding
// CheckpointFile or exactly one checkpoint file (found by its magic).
func LoadPath(path string) (*local.Model, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	if !fi.IsDir() {
		return local.Load(path)
	}
	if p := filepath.Join(path, CheckpointFile); fileExists(p) {
		return local.Load(p)
	}
	var found []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if isCheckpoint(p) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load checkpoint from %s: %w", path, err)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("load checkpoint from %s: found %d checkpoint files, want one (or %s)", path, len(found), CheckpointFile)
	}
	return local.Load(found[0])
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isCheckpoint(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [8]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == checkpointMagic
}

type loraRequest struct {
	Name string `json:"lora_name"`
	Path string `json:"lora_path"`
}

// adapterDir is Options.AdapterDir, opened once: every load goes through
// root, which refuses a path that leaves the directory by ".." or by a
// symbolic link.
type adapterDir struct {
	root *os.Root
	// bases are the directory's absolute path and, when it differs, the
	// same with its symbolic links resolved: an absolute lora_path must
	// lie under one of them.
	bases []string
}

func openAdapterDir(dir string) (*adapterDir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localserve: adapter directory %s: %w", dir, err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("localserve: adapter directory: %w", err)
	}
	ad := &adapterDir{root: root, bases: []string{abs}}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		ad.bases = append(ad.bases, real)
	}
	return ad, nil
}

func (ad *adapterDir) close() { ad.root.Close() }

// errAdapter is a load that the request got wrong; its message is safe
// to send back: it names the request's path, never the file's bytes.
type errAdapter struct{ msg string }

func (e *errAdapter) Error() string { return e.msg }

func adapterErrorf(format string, args ...any) error {
	return &errAdapter{fmt.Sprintf(format, args...)}
}

// rel turns a lora_path into a path inside the directory: an absolute
// path must lie under it, a relative one is taken from it; neither may
// climb out with "..".
func (ad *adapterDir) rel(p string) (string, error) {
	if !filepath.IsAbs(p) {
		if rel := filepath.Clean(p); filepath.IsLocal(rel) {
			return rel, nil
		}
		return "", adapterErrorf("lora_path %q leaves the adapter directory", p)
	}
	p = filepath.Clean(p)
	for _, base := range ad.bases {
		if rel, err := filepath.Rel(base, p); err == nil && filepath.IsLocal(rel) {
			return rel, nil
		}
	}
	return "", adapterErrorf("lora_path %q is not under the server's adapter directory", p)
}

// load is what /v1/load_lora_adapter reads: a models/local
// checkpoint at lora_path, which must lie under the adapter directory
// (an absolute path under it, or a path relative to it) without leaving
// it by ".." or a symbolic link (an absolute link is refused even when
// it points inside). The path names a checkpoint file or a
// directory holding CheckpointFile (the finetune stage's output
// directory); nothing is searched. Only a regular file of at most
// maxBytes is read, and it is checked after it is opened (a FIFO, a
// device, a directory or a larger file is refused without reading it);
// it is read once, whole, and must be a valid checkpoint. Errors name
// the path and the reason, never the file's bytes.
func (ad *adapterDir) load(p string, maxBytes int64) (*local.Model, error) {
	rel, err := ad.rel(p)
	if err != nil {
		return nil, err
	}
	// Stat first, so that a FIFO or a device is never opened; the open
	// below is non-blocking and checked again, should the file change
	// in between.
	fi, err := ad.root.Stat(rel)
	if err == nil && fi.IsDir() {
		rel = filepath.Join(rel, CheckpointFile)
		if fi, err = ad.root.Stat(rel); errors.Is(err, fs.ErrNotExist) {
			return nil, adapterErrorf("lora_path %q: a directory without %s", p, CheckpointFile)
		}
	}
	if err != nil {
		return nil, adapterErrorf("lora_path %q: %s", p, statReason(err))
	}
	if err := checkFile(fi, maxBytes); err != nil {
		return nil, adapterErrorf("lora_path %q: %v", p, err)
	}
	f, err := ad.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, adapterErrorf("lora_path %q: %s", p, statReason(err))
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, adapterErrorf("lora_path %q: %s", p, statReason(err))
	}
	if err := checkFile(fi, maxBytes); err != nil {
		return nil, adapterErrorf("lora_path %q: %v", p, err)
	}
	// The size fstat gave bounds the read: a file that grows meanwhile,
	// or a pseudo-file that says 0 and streams more, is read no further.
	var magic [len(checkpointMagic)]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != checkpointMagic {
		return nil, adapterErrorf("lora_path %q: not a whale checkpoint (no %s magic)", p, checkpointMagic)
	}
	data := make([]byte, fi.Size())
	copy(data, magic[:])
	if _, err := io.ReadFull(f, data[len(magic):]); err != nil {
		return nil, adapterErrorf("lora_path %q: the file changed while it was read", p)
	}
	m, err := local.DecodeCheckpoint(data)
	if err != nil {
		return nil, &errCorrupt{path: p, err: err}
	}
	return m, nil
}

const checkpointMagic = "WHALELM1"

// errCorrupt is a checkpoint that does not decode: the client hears that
// it is corrupt, the server's log gets the details.
type errCorrupt struct {
	path string
	err  error
}

func (e *errCorrupt) Error() string {
	return fmt.Sprintf("lora_path %q: not a valid checkpoint for this build (corrupt, truncated or of another format version; the server log says why)", e.path)
}

func checkFile(fi fs.FileInfo, maxBytes int64) error {
	switch {
	case fi.IsDir():
		return errors.New("a directory, want a checkpoint file")
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file but %s", kindOf(fi.Mode()))
	case fi.Size() > maxBytes:
		return fmt.Errorf("%d bytes, more than the limit of %d for a checkpoint", fi.Size(), maxBytes)
	}
	return nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

// statReason says why a path could not be opened without the operating
// system's wording, which may repeat the path resolved through links.
func statReason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case strings.Contains(err.Error(), "escapes from parent"):
		return "goes through a symbolic link that leaves the adapter directory or is absolute"
	case errors.Is(err, syscall.ELOOP):
		return "too many symbolic links"
	case errors.Is(err, syscall.ENOTDIR):
		return "a path component is not a directory"
	}
	return "cannot be opened"
}

func (s *Server) load(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Name == "" || req.Path == "" {
		apiError(w, http.StatusBadRequest, "BadRequestError", "both lora_name and lora_path must be provided")
		return
	}
	if s.lookup(req.Name) != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "The lora adapter '%s' has already been loaded.", req.Name)
		return
	}
	// One load at a time, so that at most one file of MaxAdapterBytes is
	// in memory however many loads arrive; the lock on the models is not
	// held meanwhile, so requests keep flowing.
	select {
	case s.loading <- struct{}{}:
		defer func() { <-s.loading }()
	case <-r.Context().Done():
		s.timedOut(w, r)
		return
	}
	m, err := s.adapter.load(req.Path, s.opts.MaxAdapterBytes)
	var ce *errCorrupt
	if errors.As(err, &ce) {
		s.log.Warn("localserve: adapter checkpoint does not decode", "name", req.Name, "path", req.Path, "err", ce.err)
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "load lora adapter %q: %v", req.Name, err)
		return
	}
	if m.Config().Vocab != local.TokenizerVocab {
		apiError(w, http.StatusBadRequest, "BadRequestError", "load lora adapter %q: vocab %d is not the byte tokenizer's %d", req.Name, m.Config().Vocab, local.TokenizerVocab)
		return
	}
	s.mu.Lock()
	if _, ok := s.models[req.Name]; ok {
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, "BadRequestError", "The lora adapter '%s' has already been loaded.", req.Name)
		return
	}
	s.models[req.Name] = &served{name: req.Name, parent: s.opts.Name, root: req.Path, digest: m.Digest(), m: m, created: time.Now().Unix()}
	s.mu.Unlock()
	s.log.Info("localserve: checkpoint loaded", "name", req.Name, "path", req.Path, "digest", m.Digest())
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
}

func (s *Server) unload(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Name == s.opts.Name {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%q is the base model, not an adapter", req.Name)
		return
	}
	s.mu.Lock()
	_, ok := s.models[req.Name]
	delete(s.models, req.Name)
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "NotFoundError", "The lora adapter '%s' cannot be found.", req.Name)
		return
	}
	s.log.Info("localserve: checkpoint unloaded", "name", req.Name)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.Name)
}
