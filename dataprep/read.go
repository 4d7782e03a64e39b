package dataprep

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// ErrBadInput is wrapped by the errors that are the user's to fix.
var ErrBadInput = errors.New("bad input")

// TasksTable is the table a dataset's tasks are in.
const TasksTable = "tasks"

// digest is the first 16 bytes of a SHA-256: collisions among even
// billions of tasks are out of reach, at half the memory of the whole sum.
type digest [16]byte

func sum16(parts ...[]byte) digest {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
	}
	var d digest
	copy(d[:], h.Sum(nil))
	return d
}

// readDataset reads the manifest of dataset name, saying what to do when
// there is none.
func readDataset(ctx context.Context, s *storage.Store, what, name string) (*storage.Manifest, error) {
	m, err := storage.ReadDataset(ctx, s, name)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s: no dataset %s in %s (whale ls --root %s lists the datasets; whale data import adds one)",
			ErrBadInput, what, name, s.URL(), s.URL())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return m, nil
}

// eachTask streams the tasks of a committed dataset in file order.
func eachTask(ctx context.Context, s *storage.Store, m *storage.Manifest, fn func(schemas.Task) error) error {
	for _, f := range m.Table(TasksTable) {
		ra, err := m.OpenFile(ctx, s, f)
		if err != nil {
			return err
		}
		if err := schemas.ReadRows(ctx, ra, ra.Size(), fn); err != nil {
			return fmt.Errorf("read %s/%s: %w", m.Dir, f.Name, err)
		}
	}
	return nil
}

// rows is the number of tasks the manifest records.
func rows(m *storage.Manifest) int64 {
	var n int64
	for _, f := range m.Table(TasksTable) {
		n += f.Rows
	}
	return n
}

// NormalizeQuestion is the form in which two questions are compared:
// lowercase, with every run of whitespace one space and none at the ends.
func NormalizeQuestion(q string) string {
	return strings.Join(strings.Fields(strings.ToLower(q)), " ")
}

// prefix shortens a question for an error message.
func prefix(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	const max = 60
	r := []rune(q)
	if len(r) > max {
		return string(r[:max]) + "…"
	}
	return q
}

func isNotFound(err error) bool { return errors.Is(err, storage.ErrNotFound) }
