package storage

import (
	"context"
	"fmt"
	"io"
)

// ReaderAt gives random access to one object through range reads, for
// Parquet footers and column chunks. It is safe for concurrent use.
type ReaderAt struct {
	ctx  context.Context
	s    *Store
	key  string
	size int64
}

// OpenReaderAt stats key and returns a ReaderAt over it. Every ReadAt runs
// under ctx, so ctx must outlive the ReaderAt's use.
func (s *Store) OpenReaderAt(ctx context.Context, key string) (*ReaderAt, error) {
	a, err := s.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	return &ReaderAt{ctx: ctx, s: s, key: key, size: a.Size}, nil
}

// Size is the object's size in bytes.
func (r *ReaderAt) Size() int64 { return r.size }

// ReadAt reads len(p) bytes at off with one range request.
func (r *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", r.key)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	want := int64(len(p))
	if off+want > r.size {
		want = r.size - off
	}
	var n int
	err := r.s.retry.do(r.ctx, "read", func() error {
		r.s.n.reads.Add(1)
		rc, err := r.s.bucket.NewRangeReader(r.ctx, r.key, off, want, nil)
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err = io.ReadFull(rc, p[:want])
		return err
	})
	if err != nil {
		return n, r.s.fail("read", r.key, err)
	}
	if int64(n) < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}
