package storage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path"
)

// PartWriter writes one data file of a stage. Bytes spool to a local
// temporary file while their sha256 and size are computed; Close uploads
// the file with Put (retried from the file) and removes the spool. Memory
// stays flat whatever the file's size, and a crash before Close leaves
// nothing in the bucket. The uploaded object is still invisible to readers
// until a committed manifest names it.
//
// A PartWriter is not safe for concurrent use.
type PartWriter struct {
	ctx     context.Context
	s       *Store
	key     string
	table   string
	shard   int
	f       *os.File
	tmp     string // non-empty while the spool file still has a name to remove
	buf     *bufio.Writer
	h       hash.Hash
	size    int64
	rows    int64
	closed  bool
	aborted bool
	err     error
	entry   FileEntry
	onDone  func(*PartWriter)
}

// NewPartWriter starts a part file that Close will upload to key. The
// spool goes to Options.TempDir, or os.TempDir. ctx bounds the upload.
func (s *Store) NewPartWriter(ctx context.Context, key string) (*PartWriter, error) {
	if err := checkKey(key); err != nil {
		return nil, s.fail("write", key, err)
	}
	f, err := os.CreateTemp(s.tempDir, "whale-part-*")
	if err != nil {
		return nil, fmt.Errorf("spool part %s: %w", key, err)
	}
	w := &PartWriter{ctx: ctx, s: s, key: key, f: f, buf: bufio.NewWriterSize(f, 64<<10), h: sha256.New()}
	// Unlinked at once where the OS allows it: the open descriptor keeps
	// the data, and a killed process leaves no spool behind.
	if os.Remove(f.Name()) != nil {
		w.tmp = f.Name()
	}
	return w, nil
}

// Key is where the file will be uploaded.
func (w *PartWriter) Key() string { return w.key }

// Write spools p.
func (w *PartWriter) Write(p []byte) (int, error) {
	if w.closed {
		return 0, fmt.Errorf("write part %s: %w", w.key, os.ErrClosed)
	}
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.buf.Write(p)
	w.h.Write(p[:n])
	w.size += int64(n)
	if err != nil {
		w.err = fmt.Errorf("spool part %s: %w", w.key, err)
		return n, w.err
	}
	return n, nil
}

// SetRows records how many rows the file holds.
func (w *PartWriter) SetRows(n int64) { w.rows = n }

// Size is the number of bytes written so far.
func (w *PartWriter) Size() int64 { return w.size }

// Close uploads the file and removes the spool. Calling Close again
// returns the first result.
func (w *PartWriter) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	defer w.release()
	if w.err != nil {
		return w.err
	}
	if err := w.buf.Flush(); err != nil {
		w.err = fmt.Errorf("spool part %s: %w", w.key, err)
		return w.err
	}
	if err := w.s.Put(w.ctx, w.key, w.f); err != nil {
		w.err = fmt.Errorf("upload part: %w", err)
		return w.err
	}
	w.entry = FileEntry{
		Name:   path.Base(w.key),
		Table:  w.table,
		Shard:  w.shard,
		Size:   w.size,
		SHA256: "sha256:" + hex.EncodeToString(w.h.Sum(nil)),
		Rows:   w.rows,
	}
	return nil
}

// Finish sets the row count, closes, and returns the file's entry.
func (w *PartWriter) Finish(rows int64) (FileEntry, error) {
	w.SetRows(rows)
	if err := w.Close(); err != nil {
		return FileEntry{}, err
	}
	return w.entry, nil
}

// Entry describes the uploaded file; it is valid after Close returned nil.
func (w *PartWriter) Entry() FileEntry { return w.entry }

// Abort discards the file: nothing is uploaded and the spool is removed.
func (w *PartWriter) Abort() {
	if w.closed {
		return
	}
	w.closed, w.aborted = true, true
	w.err = errors.New("part writer aborted")
	w.release()
}

func (w *PartWriter) release() {
	w.f.Close()
	if w.tmp != "" {
		os.Remove(w.tmp)
	}
	if w.onDone != nil {
		w.onDone(w)
	}
}
