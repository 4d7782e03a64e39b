package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// VerifyError lists what is wrong with a committed stage's files.
type VerifyError struct {
	Dir      string
	Problems []string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("verify %s: %d problem(s): %s", e.Dir, len(e.Problems), strings.Join(e.Problems, "; "))
}

// Verify checks that every file the manifest names exists with the recorded
// size and, with checksums, the recorded sha256 (which reads every byte).
// Problems come back together as a *VerifyError.
func Verify(ctx context.Context, s *Store, m *Manifest, checksums bool) error {
	problems := make([]string, len(m.Files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelReads)
	for i, f := range m.Files {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			key := m.FileKey(f)
			a, err := s.Stat(gctx, key)
			if errors.Is(err, ErrNotFound) {
				problems[i] = fmt.Sprintf("%s: missing", f.Name)
				return nil
			}
			if err != nil {
				return err
			}
			if a.Size != f.Size {
				problems[i] = fmt.Sprintf("%s: %d bytes, manifest says %d", f.Name, a.Size, f.Size)
				return nil
			}
			if !checksums {
				return nil
			}
			r, err := s.NewReader(gctx, key)
			if err != nil {
				return err
			}
			defer r.Close()
			h := sha256.New()
			if _, err := io.Copy(h, r); err != nil {
				return fmt.Errorf("verify %s: %w", key, err)
			}
			if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
				problems[i] = fmt.Sprintf("%s: content hashes to %s, manifest says %s", f.Name, short(got), short(f.SHA256))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("verify %s: %w", m.Dir, err)
	}
	var out []string
	for _, p := range problems {
		if p != "" {
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		return &VerifyError{Dir: m.Dir, Problems: out}
	}
	return nil
}

// Garbage lists the objects in a run's stage folders that no committed
// manifest names and that are older than olderThan: files uploaded by a
// try that crashed or lost its shard's commit race, and whole uncommitted
// attempts whose newest object is older than olderThan. It deletes
// nothing; a cleaner may delete what it returns. Pick olderThan well above
// the longest a shard may run, or a slow attempt still in progress would
// be listed.
func Garbage(ctx context.Context, s *Store, run string, olderThan time.Duration) ([]Entry, error) {
	scans, err := scanRun(ctx, s, run)
	if err != nil {
		return nil, err
	}
	cutoff := time.Now().Add(-olderThan)
	var out []Entry
	for _, f := range scans {
		if !f.committed {
			if f.newest.Before(cutoff) {
				out = append(out, f.objects...)
			}
			continue
		}
		m, err := ReadManifest(ctx, s, f.dir)
		if err != nil {
			return nil, err
		}
		named := map[string]bool{ManifestName: true, InputsName: true}
		for _, fe := range m.Files {
			named[fe.Name] = true
		}
		for _, e := range f.objects {
			inner := strings.TrimPrefix(e.Key, f.dir+"/")
			if named[inner] || strings.HasPrefix(inner, PartsDir+"/") {
				continue
			}
			if e.ModTime.Before(cutoff) {
				out = append(out, e)
			}
		}
	}
	return out, nil
}
