package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

// tools.retriever index:NAME opens the index whale index build committed
// under indexes/NAME, downloading it into the cache once.
func TestRuntimeStoredIndex(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := filepath.Join(t.TempDir(), "idx")
	if _, err := searchqa.BuildIndex(ctx, dir, searchqa.FileCorpus("../domains/searchqa/testdata/corpus.jsonl"), searchqa.BuildOptions{Logger: discard}); err != nil {
		t.Fatal(err)
	}
	if _, err := searchqa.UploadIndex(ctx, s, "wiki", dir); err != nil {
		t.Fatal(err)
	}
	exp := &spec.Experiment{Domain: "searchqa", Tools: spec.Tools{Retriever: "index:wiki"},
		Model: spec.Model{Provider: spec.ProviderOpenAI, Name: "m", Endpoints: []string{"http://127.0.0.1:9/v1"}}}
	cache := t.TempDir()
	rt, err := NewRuntime(ctx, s, exp, RuntimeOptions{Log: discard, CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 1 {
		t.Errorf("cache holds %d entries, want the index", len(ents))
	}

	exp.Tools.Retriever = "index:missing"
	if _, err := NewRuntime(ctx, s, exp, RuntimeOptions{Log: discard, CacheDir: cache}); !errors.Is(err, searchqa.ErrNoIndex) {
		t.Errorf("missing index: %v", err)
	}
}
