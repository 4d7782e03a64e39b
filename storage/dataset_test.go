package storage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
)

// datasetStores runs fn against a fresh mem://, file:// and S3
// (versitygw) root.
func datasetStores(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	t.Run("mem", func(t *testing.T) { fn(t, openDatasetStore(t, "mem://")) })
	t.Run("file", func(t *testing.T) { fn(t, openDatasetStore(t, "file://"+t.TempDir())) })
	t.Run("s3", func(t *testing.T) { fn(t, openDatasetStore(t, s3test.NewBucketURL(t))) })
}

func openDatasetStore(t *testing.T, url string) *storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), url, &storage.Options{Retry: &fastRetry, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// srcConfig is what a test dataset is a function of, as an importer's
// config would be.
type srcConfig struct {
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
}

// writeDataset starts dataset name and, when it is new, writes one tasks
// file of the given lines. It returns the writer uncommitted (nil when the
// name was committed already) and the previous manifest.
func writeDataset(t *testing.T, s *storage.Store, name string, cfg any, lines []string) (*storage.DatasetWriter, *storage.Manifest, error) {
	t.Helper()
	ctx := context.Background()
	dw, prev, err := storage.NewDatasetWriter(ctx, s, name, cfg, "test")
	if err != nil || prev != nil {
		return dw, prev, err
	}
	pw, err := dw.Create(ctx, "tasks", "txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		fmt.Fprintln(pw, l)
	}
	if _, err := pw.Finish(int64(len(lines))); err != nil {
		t.Fatal(err)
	}
	return dw, nil, nil
}

// importDataset writes and commits dataset name; prev is set instead when
// the same data was committed before.
func importDataset(t *testing.T, s *storage.Store, name string, cfg any, lines []string) (m, prev *storage.Manifest, err error) {
	t.Helper()
	dw, prev, err := writeDataset(t, s, name, cfg, lines)
	if err != nil || prev != nil {
		return nil, prev, err
	}
	m, err = dw.Commit(context.Background(), map[string]any{"tasks": len(lines)})
	return m, nil, err
}

// allKeys lists every object of the store.
func allKeys(t *testing.T, s *storage.Store) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), "", false, func(e storage.Entry) error {
		keys = append(keys, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

func readTable(t *testing.T, s *storage.Store, m *storage.Manifest, table string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range m.Table(table) {
		r, err := m.NewFileReader(context.Background(), s, f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(&b, r); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	return b.String()
}

func TestDatasetCommitReadList(t *testing.T) {
	datasetStores(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		data := map[string][]string{"alpha": {"a1", "a2", "a3"}, "beta": {"b1", "b2"}}
		committed := map[string]*storage.Manifest{}
		for _, name := range []string{"beta", "alpha"} {
			m, prev, err := importDataset(t, s, name, srcConfig{Source: name + ".jsonl", SHA256: "sha256:" + name}, data[name])
			if err != nil || prev != nil {
				t.Fatalf("import %s: prev %v, err %v", name, prev, err)
			}
			committed[name] = m
		}
		// Written but never committed: invisible.
		if _, _, err := writeDataset(t, s, "gamma", srcConfig{Source: "g"}, []string{"g1"}); err != nil {
			t.Fatal(err)
		}

		for name, lines := range data {
			m, err := storage.ReadDataset(ctx, s, name)
			if err != nil {
				t.Fatal(err)
			}
			if m.Dir != storage.DatasetDir(name) || m.Key != storage.DatasetDir(name)+"/"+storage.ManifestName {
				t.Errorf("%s: dir %q key %q", name, m.Dir, m.Key)
			}
			if m.Digest != committed[name].Digest || m.Rows("tasks") != int64(len(lines)) || len(m.Files) != 1 {
				t.Errorf("%s: read %+v, committed %+v", name, m, committed[name])
			}
			raw, err := s.ReadAll(ctx, m.Key)
			if err != nil {
				t.Fatal(err)
			}
			if m.Digest != storage.DigestBytes(raw) {
				t.Errorf("%s: digest %s is not the manifest's bytes' %s", name, m.Digest, storage.DigestBytes(raw))
			}
			if got, want := readTable(t, s, m, "tasks"), strings.Join(lines, "\n")+"\n"; got != want {
				t.Errorf("%s: tasks %q, want %q", name, got, want)
			}
			if err := storage.Verify(ctx, s, m, true); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if m.Summary["tasks"] != float64(len(lines)) || m.WhaleVersion != "test" {
				t.Errorf("%s: summary %v, version %q", name, m.Summary, m.WhaleVersion)
			}
		}

		list, err := storage.ListDatasets(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range list {
			if l.Err != nil {
				t.Fatalf("dataset %s: %v", l.Name, l.Err)
			}
			names = append(names, strings.TrimPrefix(l.Manifest.Dir, storage.DatasetsPrefix))
		}
		if strings.Join(names, ",") != "alpha,beta" {
			t.Errorf("ListDatasets = %v, want alpha,beta (gamma is not committed)", names)
		}
		for _, name := range []string{"gamma", "nope"} {
			if _, err := storage.ReadDataset(ctx, s, name); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("ReadDataset(%s) = %v, want ErrNotFound", name, err)
			}
		}
	})
}

func TestDatasetSameAndOtherConfig(t *testing.T) {
	datasetStores(t, func(t *testing.T, s *storage.Store) {
		cfg := srcConfig{Source: "tasks.jsonl", SHA256: "sha256:aaaa"}
		first, _, err := importDataset(t, s, "tasks", cfg, []string{"x", "y"})
		if err != nil {
			t.Fatal(err)
		}
		before := allKeys(t, s)

		// The same config, even built as a map, is the same dataset.
		for _, same := range []any{cfg, map[string]any{"sha256": "sha256:aaaa", "source": "tasks.jsonl"}} {
			dw, prev, err := storage.NewDatasetWriter(context.Background(), s, "tasks", same, "other-version")
			if err != nil || dw != nil || prev == nil || prev.Digest != first.Digest {
				t.Fatalf("same config %#v: writer %v, prev %v, err %v", same, dw, prev, err)
			}
		}

		other := srcConfig{Source: "tasks.jsonl", SHA256: "sha256:bbbb"}
		dw, prev, err := storage.NewDatasetWriter(context.Background(), s, "tasks", other, "test")
		if !errors.Is(err, storage.ErrDatasetDiffers) || dw != nil {
			t.Fatalf("other config: writer %v, err %v; want ErrDatasetDiffers", dw, err)
		}
		if prev == nil || prev.Digest != first.Digest {
			t.Errorf("other config: prev %v, want the committed manifest", prev)
		}
		for _, want := range []string{"config.sha256", "sha256:aaaa", "sha256:bbbb", "datasets/tasks"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if after := allKeys(t, s); strings.Join(after, ",") != strings.Join(before, ",") {
			t.Errorf("checks wrote to the bucket: %v → %v", before, after)
		}
	})
}

func TestDatasetAbortLeavesNothing(t *testing.T) {
	datasetStores(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		dw, prev, err := storage.NewDatasetWriter(ctx, s, "aborted", srcConfig{Source: "a"}, "test")
		if err != nil || prev != nil {
			t.Fatal(prev, err)
		}
		for _, table := range []string{"tasks", "extra"} {
			pw, err := dw.Create(ctx, table, "parquet")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pw.Write([]byte(strings.Repeat("data ", 1000))); err != nil {
				t.Fatal(err)
			}
		}
		dw.Abort()
		if keys := allKeys(t, s); len(keys) != 0 {
			t.Errorf("after Abort the bucket holds %v", keys)
		}
		if m, err := dw.Commit(ctx, nil); err == nil {
			t.Errorf("Commit after Abort committed %+v", m)
		}
		if keys := allKeys(t, s); len(keys) != 0 {
			t.Errorf("after Commit of an aborted writer the bucket holds %v", keys)
		}
		if _, err := storage.ReadDataset(ctx, s, "aborted"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("ReadDataset after Abort: %v", err)
		}
	})
}

// Two imports of the same data that both start before either commits:
// one writes the manifest, the other gets the same manifest back.
func TestDatasetConcurrentSameImport(t *testing.T) {
	datasetStores(t, func(t *testing.T, s *storage.Store) {
		const n = 4
		cfg := srcConfig{Source: "same.csv", SHA256: "sha256:same"}
		writers := make([]*storage.DatasetWriter, n)
		for i := range writers {
			dw, prev, err := writeDataset(t, s, "same", cfg, []string{"p", "q", "r"})
			if err != nil || prev != nil {
				t.Fatal(prev, err)
			}
			writers[i] = dw
		}
		ms := make([]*storage.Manifest, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, dw := range writers {
			wg.Go(func() { ms[i], errs[i] = dw.Commit(context.Background(), map[string]any{"tasks": 3}) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("writer %d: %v", i, errs[i])
			}
			if ms[i].Digest != ms[0].Digest {
				t.Errorf("writer %d got manifest %s, writer 0 %s", i, ms[i].Digest, ms[0].Digest)
			}
		}
		m, err := storage.ReadDataset(context.Background(), s, "same")
		if err != nil {
			t.Fatal(err)
		}
		if m.Digest != ms[0].Digest || len(m.Files) != 1 || readTable(t, s, m, "tasks") != "p\nq\nr\n" {
			t.Errorf("committed %+v", m)
		}
		// The losers' files stay as garbage next to the winner's, never
		// named by the manifest.
		var files int
		for _, k := range allKeys(t, s) {
			if strings.HasPrefix(k, "datasets/same/tasks-") {
				files++
			}
		}
		if files != n {
			t.Errorf("%d data files in the folder, want %d (one per writer)", files, n)
		}
	})
}

// Two imports of different data under one name racing: one commits, the
// other is told the name is taken.
func TestDatasetConcurrentOtherImport(t *testing.T) {
	datasetStores(t, func(t *testing.T, s *storage.Store) {
		a, _, err := writeDataset(t, s, "raced", srcConfig{Source: "a.csv", SHA256: "sha256:a"}, []string{"a"})
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := writeDataset(t, s, "raced", srcConfig{Source: "b.csv", SHA256: "sha256:b"}, []string{"b"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var errA, errB error
		wg.Go(func() { _, errA = a.Commit(context.Background(), nil) })
		wg.Go(func() { _, errB = b.Commit(context.Background(), nil) })
		wg.Wait()
		if (errA == nil) == (errB == nil) {
			t.Fatalf("want exactly one winner: a %v, b %v", errA, errB)
		}
		loser := errA
		if loser == nil {
			loser = errB
		}
		if !errors.Is(loser, storage.ErrDatasetDiffers) {
			t.Errorf("loser: %v, want ErrDatasetDiffers", loser)
		}
	})
}

// A second Commit of one writer returns the committed manifest, whether
// the first succeeded or failed on the way (here: the manifest's upload
// was refused once).
func TestDatasetCommitAgain(t *testing.T) {
	t.Run("after success", func(t *testing.T) {
		s := openDatasetStore(t, "mem://")
		dw, _, err := writeDataset(t, s, "twice", srcConfig{Source: "t"}, []string{"1", "2"})
		if err != nil {
			t.Fatal(err)
		}
		m1, err := dw.Commit(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := dw.Commit(context.Background(), nil)
		if err != nil {
			t.Fatalf("second Commit: %v", err)
		}
		if m1.Digest != m2.Digest || len(m2.Files) != 1 {
			t.Errorf("second Commit: %+v, first %+v", m2, m1)
		}
	})
	t.Run("after failure", func(t *testing.T) {
		srv := s3test.Shared(t)
		proxy := s3test.NewFaultProxy(t, srv.Endpoint)
		s := openDatasetStore(t, s3test.URLFor(proxy.URL, srv.NewBucket(t)))
		dw, _, err := writeDataset(t, s, "retried", srcConfig{Source: "t"}, []string{"1", "2"})
		if err != nil {
			t.Fatal(err)
		}
		proxy.Inject(1, s3test.Forbidden)
		if m, err := dw.Commit(context.Background(), nil); err == nil {
			t.Fatalf("Commit through a refused upload committed %+v", m)
		}
		m, err := dw.Commit(context.Background(), nil)
		if err != nil {
			t.Fatalf("second Commit: %v", err)
		}
		if len(m.Files) != 1 || m.Rows("tasks") != 2 {
			t.Errorf("second Commit: %d files, %d rows", len(m.Files), m.Rows("tasks"))
		}
		if _, err := storage.ReadDataset(context.Background(), s, "retried"); err != nil {
			t.Errorf("read back: %v", err)
		}
	})
}

func TestCheckDataset(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"lichess-train", true},
		{"a", true},
		{"nq2", true},
		{"r001-w01", true}, // reads back as a round position; harmless
		{"rounds-1", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{"Lichess", false},
		{"a_b", false},
		{"a--b", false},
		{"-a", false},
		{"a-", false},
		{"a.b", false},
		{"a/b", false},
		{"..", false},
		{strings.Repeat("a", 65), false},
		// Not positions the planner writes, but storage does not read the
		// position grammar (pipeline/schedule does, and rejects these):
		// the dataset commits and reads back like any other.
		{"r1-train", true},
		{"r2024-puzzles", true},
	}
	s := openDatasetStore(t, "mem://")
	for _, c := range cases {
		err := storage.CheckDataset(c.name)
		if (err == nil) != c.ok {
			t.Errorf("CheckDataset(%q) = %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if !c.ok {
			if !strings.Contains(err.Error(), "dataset name") {
				t.Errorf("CheckDataset(%q): %q does not say what is wrong", c.name, err)
			}
			if _, _, err := storage.NewDatasetWriter(context.Background(), s, c.name, nil, "test"); err == nil {
				t.Errorf("NewDatasetWriter accepted %q", c.name)
			}
			continue
		}
		// Every name accepted must commit and read back.
		m, _, err := importDataset(t, s, c.name, srcConfig{Source: c.name}, []string{"x"})
		if err != nil {
			t.Errorf("import %q: %v", c.name, err)
			continue
		}
		got, err := storage.ReadDataset(context.Background(), s, c.name)
		if err != nil || got.Digest != m.Digest {
			t.Errorf("read back %q: %v", c.name, err)
		}
	}
}

// A manifest copied under another name is refused rather than served as
// that dataset.
func TestReadDatasetCopied(t *testing.T) {
	dir := t.TempDir()
	s := openDatasetStore(t, "file://"+dir)
	if _, _, err := importDataset(t, s, "orig", srcConfig{Source: "o"}, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "datasets", "orig", storage.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAll(context.Background(), "datasets/copy/"+storage.ManifestName, raw); err != nil {
		t.Fatal(err)
	}
	_, err = storage.ReadDataset(context.Background(), s, "copy")
	if err == nil || errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "copied") {
		t.Errorf("ReadDataset of a copied manifest: %v", err)
	}
}
