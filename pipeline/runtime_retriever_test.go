package pipeline

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
)

// A retriever server that wants a token (whale index serve with
// WHALE_SERVE_TOKEN) answers the searches of a runtime whose
// tools.retriever_api_key_env names the variable holding it, and refuses
// those of one without; a named variable that is unset is an error of
// NewRuntime, which never shows the token.
func TestRuntimeRetrieverToken(t *testing.T) {
	const token = "idx-7f3a9c2e51"
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "idx")
	if _, err := searchqa.BuildIndex(ctx, dir, searchqa.FileCorpus("../domains/searchqa/testdata/corpus.jsonl"), searchqa.BuildOptions{Logger: discard}); err != nil {
		t.Fatal(err)
	}
	ix, err := searchqa.OpenIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := searchqa.NewHTTPServer(ix, searchqa.ServerOptions{Token: token, Logger: discard})
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	url := "http://" + ln.Addr().String()

	search := func(keyEnv string) (string, error) {
		t.Helper()
		exp := &spec.Experiment{Domain: "searchqa", Tools: spec.Tools{Retriever: url, RetrieverAPIKeyEnv: keyEnv},
			Model: spec.Model{Provider: spec.ProviderOpenAI, Name: "m", Endpoints: []string{"http://127.0.0.1:9/v1"}}}
		rt, err := NewRuntime(ctx, nil, exp, RuntimeOptions{Log: discard})
		if err != nil {
			return "", err
		}
		defer rt.Close()
		env, err := rt.Domain.NewEnv(ctx, schemas.Task{ID: "q1", Question: "Who wrote Frankenstein?", Answers: []string{"Mary Shelley"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		step, err := env.Step(ctx, harness.Action{Kind: "tool", Tool: searchqa.ToolSearch, Input: "Frankenstein novel author"})
		if err != nil {
			t.Fatal(err)
		}
		if step.ToolError != "" {
			return "", errors.New(step.ToolError)
		}
		res, _ := step.ToolResult.(map[string]any)
		text, _ := res["text"].(string)
		return text, nil
	}

	t.Setenv("WHALE_TEST_RETRIEVER_TOKEN", token)
	text, err := search("WHALE_TEST_RETRIEVER_TOKEN")
	if err != nil || !strings.Contains(text, "Doc 1(Title: Frankenstein)") {
		t.Errorf("with the token: %q, %v", text, err)
	}
	_, err = search("")
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), token) {
		t.Errorf("without the token: %v, want a 401 that does not show it", err)
	}
	t.Setenv("WHALE_TEST_RETRIEVER_TOKEN", "")
	_, err = search("WHALE_TEST_RETRIEVER_TOKEN")
	if err == nil || !strings.Contains(err.Error(), "tools.retriever") || !strings.Contains(err.Error(), "WHALE_TEST_RETRIEVER_TOKEN") {
		t.Errorf("unset variable: %v", err)
	}
	// /health stays open: the server is up, only the searches need the token.
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/health: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
