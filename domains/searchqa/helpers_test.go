package searchqa

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// jsonlCorpus reads JSONL corpus lines from r (see eachJSONL); name labels
// errors. r is read once: Each cannot be repeated.
func jsonlCorpus(r io.Reader, name string) Corpus {
	return CorpusFunc(func(ctx context.Context, fn func(Doc) error) error {
		return eachJSONL(ctx, r, name, fn)
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

var (
	sharedOnce sync.Once
	sharedDir  string
	sharedErr  error
)

// testIndex returns the index of testdata/corpus.jsonl, built once per test
// binary and opened read-only by each caller.
func testIndex(t testing.TB) *Index {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "searchqa-test-*")
		if sharedErr == nil {
			_, sharedErr = BuildIndex(context.Background(), filepath.Join(sharedDir, "idx"), FileCorpus("testdata/corpus.jsonl"), BuildOptions{})
		}
	})
	if sharedErr != nil {
		t.Fatalf("build test index: %v", sharedErr)
	}
	x, err := OpenIndex(filepath.Join(sharedDir, "idx"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

type testQuestion struct {
	ID            string   `json:"id"`
	Question      string   `json:"question"`
	GoldenAnswers []string `json:"golden_answers"`
	Domain        string   `json:"domain"`
	Split         string   `json:"split"`
	Hops          []struct {
		Query string `json:"query"`
		Doc   string `json:"doc"`
		Title string `json:"title"`
	} `json:"hops"`
}

func readQuestions(t *testing.T) []testQuestion {
	t.Helper()
	f, err := os.Open("testdata/questions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var qs []testQuestion
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var q testQuestion
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			t.Fatalf("questions.jsonl: %v", err)
		}
		qs = append(qs, q)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return qs
}

func readCorpus(t *testing.T) []Doc {
	t.Helper()
	var docs []Doc
	if err := FileCorpus("testdata/corpus.jsonl").Each(context.Background(), func(d Doc) error {
		docs = append(docs, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return docs
}
