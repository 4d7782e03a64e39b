package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const searchCorpus = "../../domains/searchqa/testdata/corpus.jsonl"

// whale index build stores the index in the bucket; whale index serve
// answers the Search-R1 API from it over a real loopback HTTP server.
func TestIndexBuildAndServe(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		whale(t, "index", "build", searchCorpus, "--name", "wiki-test", "--root", r.url).
			mustCode(t, exitOK, "indexed 61 passages", "indexes/wiki-test")
		if len(withPrefix(r.keys(t), "indexes/wiki-test/")) != 2 {
			t.Fatalf("want the archive and its manifest under indexes/wiki-test/, got %v", r.keys(t))
		}
		before := r.keys(t)
		whale(t, "index", "build", searchCorpus, "--name", "wiki-test", "--root", r.url).mustCode(t, exitOK)
		if got := r.keys(t); strings.Join(got, ",") != strings.Join(before, ",") {
			t.Fatalf("building the same corpus again changed the bucket: %v -> %v", before, got)
		}
		other := writeFile(t, "other.jsonl", `{"id": "x", "contents": "\"Other\"\nAnother corpus entirely."}`+"\n")
		whale(t, "index", "build", other, "--name", "wiki-test", "--root", r.url).
			mustCode(t, exitConflict, "already holds an index of corpus", "choose another key")

		ctx, cancel := context.WithCancel(context.Background())
		addr := make(chan string, 1)
		done := make(chan error, 1)
		var out bytes.Buffer
		go func() {
			done <- runIndexServe(ctx, indexServeOptions{Root: r.url, Name: "wiki-test", Addr: "127.0.0.1:0",
				CacheDir: t.TempDir(), ready: func(a string) { addr <- a }}, &out)
		}()
		var base string
		select {
		case a := <-addr:
			base = "http://" + a
		case err := <-done:
			t.Fatalf("serve ended before listening: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not start listening within 30s")
		}
		body := `{"queries": ["who wrote Frankenstein", "capital city of Australia"], "topk": 3, "return_scores": true}`
		resp, err := http.Post(base+"/retrieve", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /retrieve: %s: %s", resp.Status, raw)
		}
		var got struct {
			Result [][]struct {
				Document struct{ ID, Contents string }
				Score    float64
			}
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		if len(got.Result) != 2 || len(got.Result[0]) != 3 {
			t.Fatalf("want 2 queries × 3 passages, got %s", raw)
		}
		for i, want := range []string{"Frankenstein", "Canberra"} {
			found := false
			for _, p := range got.Result[i] {
				found = found || strings.HasPrefix(p.Document.Contents, `"`+want+`"`)
			}
			if !found {
				t.Errorf("query %d: no %q passage in the top 3: %s", i, want, raw)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve after interrupt: %v", err)
		}
		if !strings.Contains(out.String(), "serving index wiki-test (61 passages)") {
			t.Errorf("serve output: %s", out.String())
		}
	})
	res := whale(t, "index", "serve", "--name", "missing", "--root", fileRoot(t).url)
	res.mustCode(t, exitUsage, `no index "missing"`)
}

// Building an index may be a root's first write, as a data import is.
func TestIndexBuildCreatesRoot(t *testing.T) {
	root := "file://" + filepath.Join(t.TempDir(), "new-root")
	whale(t, "index", "build", searchCorpus, "--name", "wiki-test", "--root", root).mustCode(t, exitOK, "indexes/wiki-test")
}
