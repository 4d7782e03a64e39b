package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"

	"gocloud.dev/blob"
)

// localTmp is where file:// roots stage exclusive creates; it sits inside
// the root so that the final hard link never crosses a filesystem.
const localTmp = ".whale-tmp"

// CreateExclusive writes data to key only if key does not exist yet. Of any
// number of concurrent callers on one key exactly one gets nil; the others
// get an error that errors.Is(err, ErrExists). The object appears whole or
// not at all.
//
// A try that failed in transit may have landed, so when a retry finds the
// key taken it reads it back: identical bytes count as our own write. Give
// every writer distinct data (leases carry a random token) where telling
// the winners apart matters.
func (s *Store) CreateExclusive(ctx context.Context, key string, data []byte) error {
	if err := checkKey(key); err != nil {
		return s.fail("create", key, err)
	}
	if s.dir != "" {
		s.n.writes.Add(1)
		if err := s.createLocal(key, data); err != nil {
			return s.fail("create", key, err)
		}
		return nil
	}
	// A create that timed out may have landed: on retry, ErrExists could
	// then be our own write. Compare content to tell.
	attempt := 0
	err := s.retry.do(ctx, "create", func() error {
		attempt++
		s.n.writes.Add(1)
		actx, cancel := s.retry.attemptContext(ctx)
		defer cancel()
		err := s.bucket.WriteAll(actx, key, data, &blob.WriterOptions{IfNotExist: true, ContentType: contentType(key)})
		if err != nil && attempt > 1 && errors.Is(kindOf(err), ErrExists) {
			s.n.reads.Add(1)
			if got, rerr := s.bucket.ReadAll(actx, key); rerr == nil && bytes.Equal(got, data) {
				return nil
			}
		}
		return err
	})
	if err != nil {
		return s.fail("create", key, err)
	}
	return nil
}

// createLocal makes the file under a temporary name and hard-links it into
// place: link(2) fails with EEXIST atomically, which fileblob's
// stat-then-rename does not.
func (s *Store) createLocal(key string, data []byte) error {
	final := filepath.Join(s.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return err
	}
	tmpDir := filepath.Join(s.dir, localTmp)
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return err
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(tmpDir, hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	// The content must be durable before the name makes it visible.
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp, final); err != nil {
		if errors.Is(err, os.ErrExist) {
			return ErrExists
		}
		return err
	}
	// The name must be durable too: losing it in a crash would make an
	// older lease generation look current again.
	if d, err := os.Open(filepath.Dir(final)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
