package localserve

import (
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
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
	return err == nil && string(b[:]) == "WHALELM1"
}

type loraRequest struct {
	Name string `json:"lora_name"`
	Path string `json:"lora_path"`
}

func (s *Server) load(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if err := decodeBody(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
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
	// Loading reads and verifies the whole file; it runs outside the lock
	// so requests keep flowing.
	m, err := LoadPath(req.Path)
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
	if err := decodeBody(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
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
