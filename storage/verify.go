package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

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
