package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/storage"
)

// Prefix is the key prefix of the archive under a root.
const Prefix = "harnesses/"

// FileName is the name of the source file inside a harness's folder.
const FileName = "harness.star"

// ErrNotFound matches Get's error when the archive has no harness of
// that id (together with storage.ErrNotFound).
var ErrNotFound = errors.New("harness not in the archive")

// ErrCorrupt matches the error of Get when the stored bytes do not hash
// to the id, and of Put when the key holds other bytes.
var ErrCorrupt = errors.New("archived harness does not match its id")

// ParseID returns the hex digest of id, which must be "sha256:" followed
// by 64 lowercase hex digits.
func ParseID(id string) (string, error) {
	h, ok := strings.CutPrefix(id, "sha256:")
	if !ok || len(h) != 2*sha256.Size {
		return "", fmt.Errorf("harness id %q: want sha256:<64 hex digits>", id)
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", fmt.Errorf("harness id %q: want sha256:<64 lowercase hex digits>", id)
		}
	}
	return h, nil
}

// Key returns the key of the harness id under a root.
func Key(id string) (string, error) {
	h, err := ParseID(id)
	if err != nil {
		return "", err
	}
	return Prefix + h + "/" + FileName, nil
}

// Put stores src and returns its id. Storing a source that is already
// there is not an error.
func Put(ctx context.Context, s *storage.Store, src []byte) (string, error) {
	if len(src) == 0 {
		return "", errors.New("archive harness: empty source")
	}
	if len(src) > harness.MaxSourceBytes {
		return "", fmt.Errorf("archive harness: source is %d bytes, more than the %d a harness may have", len(src), harness.MaxSourceBytes)
	}
	id := harness.SourceID(src)
	key, err := Key(id)
	if err != nil {
		return "", err
	}
	err = s.CreateExclusive(ctx, key, src)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, storage.ErrExists) {
		return "", fmt.Errorf("archive harness %s: %w", id, err)
	}
	have, rerr := s.ReadAll(ctx, key)
	if rerr != nil {
		return "", fmt.Errorf("archive harness %s: %s exists, reading it back: %w", id, key, rerr)
	}
	if !bytes.Equal(have, src) {
		return "", fmt.Errorf("archive harness %s: %s in %s already holds %d other bytes: %w", id, key, s.URL(), len(have), ErrCorrupt)
	}
	return id, nil
}

// Get reads the source of harness id and checks that it hashes to id.
func Get(ctx context.Context, s *storage.Store, id string) ([]byte, error) {
	key, err := Key(id)
	if err != nil {
		return nil, err
	}
	src, err := s.ReadAll(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("harness %s: no %s in %s (was it archived with Put?): %w: %w", id, key, s.URL(), ErrNotFound, err)
	}
	if err != nil {
		return nil, fmt.Errorf("harness %s: %w", id, err)
	}
	sum := sha256.Sum256(src)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != id {
		return nil, fmt.Errorf("harness %s: %s in %s hashes to %s: %w", id, key, s.URL(), got, ErrCorrupt)
	}
	return src, nil
}
