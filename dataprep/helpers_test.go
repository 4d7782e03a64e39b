package dataprep

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// forEachRoot runs fn on a file:// root and on a bucket of a real
// S3-compatible server (versitygw).
func forEachRoot(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	for _, root := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return "file://" + t.TempDir() }},
		{"s3", func(t *testing.T) string { return s3test.NewBucketURL(t) }},
	} {
		t.Run(root.name, func(t *testing.T) {
			s, err := storage.Open(context.Background(), root.url(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			fn(t, s)
		})
	}
}

// put commits tasks as dataset name, as `whale data import` does; what
// is the dataset's config.
func put(t *testing.T, s *storage.Store, name, what string, tasks []schemas.Task) {
	t.Helper()
	ctx := context.Background()
	w, prev, err := storage.NewDatasetWriter(ctx, s, name, map[string]string{"source": what}, "test")
	if err != nil || prev != nil {
		t.Fatalf("dataset %s: %v %v", name, prev, err)
	}
	pw, err := w.Create(ctx, TasksTable, "parquet")
	if err != nil {
		t.Fatal(err)
	}
	tw, err := schemas.NewWriter[schemas.Task](pw, schemas.Tasks, schemas.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Write(tasks...); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Finish(tw.Rows()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx, map[string]any{"tasks": len(tasks)}); err != nil {
		t.Fatal(err)
	}
}

// tasks makes n tasks with ids prefix-0 .. prefix-(n-1).
func tasks(prefix string, n int) []schemas.Task {
	out := make([]schemas.Task, n)
	for i := range out {
		out[i] = schemas.Task{ID: fmt.Sprintf("%s-%d", prefix, i), Domain: "demo", Split: "all",
			Question: fmt.Sprintf("(%s) What is %d + %d?", prefix, i, i%7), Answers: []string{fmt.Sprint(i + i%7)}, Meta: "{}"}
	}
	return out
}

// read returns the tasks of dataset name, in file order.
func read(t *testing.T, s *storage.Store, name string) []schemas.Task {
	t.Helper()
	m, err := storage.ReadDataset(context.Background(), s, name)
	if err != nil {
		t.Fatal(err)
	}
	var out []schemas.Task
	if err := eachTask(context.Background(), s, m, func(x schemas.Task) error { out = append(out, x); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func ids(ts []schemas.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	slices.Sort(out)
	return out
}

// wantSplit computes the split the package documents, here and on its
// own: rank the ids by the first 16 bytes of SHA-256("whale-split-v1\0",
// seed as 8 big-endian bytes, id); test, then search, then train.
func wantSplit(all []string, seed uint64, test, search, train int) (te, se, tr []string) {
	type ranked struct {
		key [16]byte
		id  string
	}
	var rs []ranked
	for _, id := range all {
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], seed)
		sum := sha256.Sum256(append(append([]byte("whale-split-v1\x00"), sb[:]...), id...))
		var k [16]byte
		copy(k[:], sum[:])
		rs = append(rs, ranked{k, id})
	}
	slices.SortFunc(rs, func(a, b ranked) int { return slices.Compare(a.key[:], b.key[:]) })
	pick := func(from, n int) []string {
		var out []string
		for _, r := range rs[from : from+n] {
			out = append(out, r.id)
		}
		slices.Sort(out)
		return out
	}
	return pick(0, test), pick(test, search), pick(test+search, train)
}
