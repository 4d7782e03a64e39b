package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

func TestLocalServe(t *testing.T) {
	m, err := local.New(local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 16, Heads: 2, DFF: 32, Context: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(filepath.Join(dir, "m.whalelm"), false); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := m.EncodeCheckpoint(&buf, false); err != nil {
		t.Fatal(err)
	}
	root := "file://" + t.TempDir()
	s := openStore(t, root)
	if err := s.WriteAll(context.Background(), "models/base.whalelm", buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{filepath.Join(dir, "m.whalelm"), dir, "models/base.whalelm"} {
		t.Run(filepath.Base(ref), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ready := make(chan string, 1)
			done := make(chan error, 1)
			var out bytes.Buffer
			go func() {
				done <- runLocalServe(ctx, localServeOptions{Root: root, Checkpoint: ref, Addr: "127.0.0.1:0", Name: "tiny",
					ready: func(u string) { ready <- u }}, &out)
			}()
			var url string
			select {
			case url = <-ready:
			case err := <-done:
				t.Fatalf("serve ended before listening: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("not listening after 30s")
			}
			c, err := models.New(models.Config{Endpoints: []string{url}, Model: "tiny"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Chat(ctx, models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}},
				Sampling: models.Sampling{MaxTokens: models.Ptr(int64(3))}})
			if err != nil {
				t.Fatal(err)
			}
			if r.Model != "tiny" || r.CompletionTokens < 1 || r.CompletionTokens > 3 {
				t.Errorf("reply %+v", r)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if !strings.Contains(out.String(), "serving tiny") {
				t.Errorf("output %q", out.String())
			}
		})
	}
	r := whale(t, "local", "serve", "--checkpoint", filepath.Join(dir, "missing"))
	if r.code != 2 || r.err == nil || !strings.Contains(r.err.Error(), "missing") {
		t.Errorf("missing checkpoint: code %d, %v", r.code, r.err)
	}
}

// whale local serve --adapter-dir lets load_lora_adapter read only under
// that directory; with $WHALE_SERVE_TOKEN set every request needs it.
func TestLocalServeAdapterDirAndToken(t *testing.T) {
	m, err := local.New(local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 16, Heads: 2, DFF: 32, Context: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	base, adapters, outside := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{base, filepath.Join(adapters, "step1"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := m.Save(filepath.Join(d, "model.whalelm"), false); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(DefaultTokenEnv, "cli-token")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		done <- runLocalServe(ctx, localServeOptions{Checkpoint: base, Addr: "127.0.0.1:0", Name: "tiny", AdapterDir: adapters,
			Token: serveToken{Env: DefaultTokenEnv}, ready: func(u string) { ready <- u }}, &out)
	}()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not listening after 30s")
	}
	post := func(path, body, token string) int {
		req, _ := http.NewRequest("POST", strings.TrimSuffix(url, "/v1")+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	load := func(name, path string) string {
		return `{"lora_name":"` + name + `","lora_path":"` + path + `"}`
	}
	if code := post("/v1/load_lora_adapter", load("a", filepath.Join(adapters, "step1")), ""); code != http.StatusUnauthorized {
		t.Errorf("load without the token: HTTP %d, want 401", code)
	}
	if code := post("/v1/load_lora_adapter", load("b", outside), "cli-token"); code != http.StatusBadRequest {
		t.Errorf("load from outside --adapter-dir: HTTP %d, want 400", code)
	}
	if code := post("/v1/load_lora_adapter", load("c", filepath.Join(adapters, "step1")), "cli-token"); code != http.StatusOK {
		t.Errorf("load from --adapter-dir: HTTP %d, want 200", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if !strings.Contains(out.String(), "adapters load from "+adapters) || !strings.Contains(out.String(), "bearer token in $"+DefaultTokenEnv) || strings.Contains(out.String(), "cli-token") {
		t.Errorf("output %q", out.String())
	}

	t.Setenv("WHALE_TEST_UNSET_TOKEN", "")
	whale(t, "local", "serve", "--checkpoint", base, "--token-env", "WHALE_TEST_UNSET_TOKEN").mustCode(t, exitUsage, "--token-env WHALE_TEST_UNSET_TOKEN")
	whale(t, "local", "serve", "--checkpoint", base, "--adapter-dir", filepath.Join(adapters, "missing")).mustCode(t, exitUsage, "--adapter-dir")
	whale(t, "local", "serve", "--checkpoint", base, "--prefix-cache-mib", "-1").mustCode(t, exitUsage, "--prefix-cache-mib -1: want 0 (off)")
	whale(t, "index", "serve", "--name", "x", "--root", fileRoot(t).url, "--token-env", "WHALE_TEST_UNSET_TOKEN").mustCode(t, exitUsage, "--token-env WHALE_TEST_UNSET_TOKEN")
}
